"""Conversion between protobuf messages (the wire and the Raft log) and core dataclasses.

The core stays stdlib-only; this is the single place that knows both shapes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core import commands as c
from coordinator.core.authz import Grant, Role
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.history import Dependency
from coordinator.core.model import (
    Agent, AgentState, Checkpoint, CheckpointKind, Epoch, EpochState, Group, GroupSpec, GroupState, Mode, Order,
    OrderKind, RetentionPolicy, SavedCheckpoint, Savepoint,
)

MODE_TO_PB = {Mode.COORDINATED: pb.COORDINATED, Mode.CIC_BCS: pb.CIC_BCS, Mode.CIC_HMNR: pb.CIC_HMNR,
              Mode.CIC_FDAS: pb.CIC_FDAS, Mode.UNCOORDINATED: pb.UNCOORDINATED}
MODE_FROM_PB = {v: k for k, v in MODE_TO_PB.items()}
KIND_TO_PB = {CheckpointKind.BASIC: pb.BASIC, CheckpointKind.FORCED: pb.FORCED,
              CheckpointKind.COORDINATED: pb.COORDINATED_CUT, CheckpointKind.INITIAL: pb.INITIAL}
KIND_FROM_PB = {v: k for k, v in KIND_TO_PB.items()}
GROUP_STATE_TO_PB = {GroupState.RUNNING: pb.RUNNING, GroupState.RECOVERING: pb.RECOVERING}
AGENT_STATE_TO_PB = {AgentState.ALIVE: pb.AGENT_ALIVE, AgentState.FAILED: pb.AGENT_FAILED,
                     AgentState.DEREGISTERED: pb.AGENT_DEREGISTERED}
EPOCH_STATE_TO_PB = {EpochState.STARTED: pb.EPOCH_STARTED, EpochState.STABLE: pb.EPOCH_STABLE,
                     EpochState.ABORTED: pb.EPOCH_ABORTED}


# Checkpoint metadata crosses the wire field for field, both ways (the names match the proto's).
_CHECKPOINT_FIELDS = tuple(f.name for f in dataclasses.fields(Checkpoint))
_ASSIGNED_BY_COORDINATOR = frozenset({"created_at", "incarnation", "stable"})


def _enum(table: dict, value: int, field: str):
    try:
        return table[value]
    except KeyError:
        raise Rejection.invalid(field, f"unknown or unspecified value {value}") from None


# ---- protobuf -> core ------------------------------------------------------------

def spec_from_pb(msg: pb.GroupSpec) -> GroupSpec:
    defaults = GroupSpec(name=msg.group)
    return GroupSpec(
        name=msg.group,
        mode=_enum(MODE_FROM_PB, msg.mode, "spec.mode") if msg.mode else defaults.mode,
        retention=msg.retention if msg.HasField("retention") else defaults.retention,
        checkpoint_interval_s=msg.checkpoint_interval_s, checkpoint_cost_s=msg.checkpoint_cost_s, mtbf_s=msg.mtbf_s,
        lease_ttl_s=msg.lease_ttl_s or defaults.lease_ttl_s, epoch_timeout_s=msg.epoch_timeout_s or defaults.epoch_timeout_s)


def token_from_pb(msg: pb.FencingToken) -> c.Token:
    """A token as proposed: its secret field already holds the SHA-256 (transport.auth.seal_secrets)."""
    return c.Token(incarnation=msg.incarnation, epoch=msg.epoch, secret_hash=msg.secret.hex())


def principal_from_pb(msg: log_pb2.Principal) -> Grant:
    return Grant(msg.identity, _enum({r.value: r for r in Role}, msg.role, "principal.role"), msg.group,
                 msg.pattern)


def principal_to_pb(grant: Grant) -> log_pb2.Principal:
    return log_pb2.Principal(identity=grant.identity, role=grant.role.value, group=grant.group,
                             pattern=grant.pattern)


def checkpoint_from_pb(msg: pb.CheckpointMeta) -> Checkpoint:
    """What an agent says about its checkpoint; the fields the coordinator assigns are
    left at their defaults whatever the message carries."""
    fields = {name: getattr(msg, name) for name in _CHECKPOINT_FIELDS if name not in _ASSIGNED_BY_COORDINATOR}
    fields["kind"] = _enum(KIND_FROM_PB, msg.kind, "checkpoint.kind")
    fields["dependency_versions"] = dict(sorted(msg.dependency_versions.items()))
    return Checkpoint(**fields)


def dependency_from_pb(msg: pb.DependencyRecord) -> Dependency:
    return Dependency(msg.sender, msg.send_interval, msg.receiver, msg.receive_interval, msg.message_id,
                      msg.send_generation)


# One decoder per command message: the servicers call them on requests, and
# command_from_pb on the log entries that embed those requests.

def create_group_from_pb(m: pb.CreateGroupRequest) -> c.CreateGroup:
    return c.CreateGroup(spec_from_pb(m.spec))


def register_from_pb(m: pb.RegisterRequest) -> c.Register:
    return c.Register(m.group, m.agent_id, m.secret.hex())


def commit_checkpoint_from_pb(m: pb.CommitCheckpointRequest) -> c.CommitCheckpoint:
    return c.CommitCheckpoint(token_from_pb(m.token), checkpoint_from_pb(m.checkpoint))


def report_dependencies_from_pb(m: pb.ReportDependenciesRequest) -> c.ReportDependencies:
    return c.ReportDependencies(m.group, m.agent_id, token_from_pb(m.token),
                                tuple(dependency_from_pb(r) for r in m.records))


def start_epoch_from_pb(m: pb.StartEpochRequest) -> c.StartEpoch:
    return c.StartEpoch(m.group)


def ack_order_from_pb(m: pb.AckOrderRequest) -> c.AckOrder:
    return c.AckOrder(m.group, m.agent_id, token_from_pb(m.token), m.order_id)


def deregister_from_pb(m: pb.DeregisterRequest) -> c.Deregister:
    return c.Deregister(m.group, m.agent_id, token_from_pb(m.token))


def garbage_collect_from_pb(m: pb.GarbageCollectRequest) -> c.GarbageCollect:
    return c.GarbageCollect(m.group, m.blob_store)


def delete_group_from_pb(m: pb.DeleteGroupRequest) -> c.DeleteGroup:
    return c.DeleteGroup(m.group)


def reset_dedupe_clock_from_pb(m: pb.ResetDedupeClockRequest) -> c.ResetDedupeClock:
    return c.ResetDedupeClock()


def create_savepoint_from_pb(m: pb.CreateSavepointRequest) -> c.CreateSavepoint:
    return c.CreateSavepoint(m.group, m.name, dict(sorted(m.labels.items())))


def delete_savepoint_from_pb(m: pb.DeleteSavepointRequest) -> c.DeleteSavepoint:
    return c.DeleteSavepoint(m.group, m.name)


def retention_policy_from_pb(m: pb.RetentionPolicy) -> RetentionPolicy:
    return RetentionPolicy(keep_last=m.keep_last, bucket_seconds=m.bucket_seconds, buckets=m.buckets)


def set_retention_from_pb(m: pb.SetRetentionRequest) -> c.SetRetention:
    return c.SetRetention(m.group, retention_policy_from_pb(m.policy))


def restore_group_from_pb(m: pb.RestoreGroupRequest) -> c.RestoreGroup:
    return c.RestoreGroup(m.group, m.savepoint, tuple(SavedCheckpoint(s.agent_id, s.index) for s in m.containing))


def fork_group_from_pb(m: pb.ForkGroupRequest) -> c.ForkGroup:
    return c.ForkGroup(m.group, m.savepoint, m.into,
                       tuple(c.ForkedCheckpoint(f.agent_id, f.index, f.blob_uri) for f in m.copies), tuple(m.agents))


_COMMAND_FROM_PB: dict[str, Callable[[Any], c.Command]] = {
    "create_group": create_group_from_pb,
    "register": register_from_pb,
    "commit_checkpoint": commit_checkpoint_from_pb,
    "report_dependencies": report_dependencies_from_pb,
    "start_epoch": start_epoch_from_pb,
    "declare_agent_failed": lambda m: c.DeclareAgentFailed(m.group, m.agent_id, m.incarnation),
    "ack_order": ack_order_from_pb,
    "deregister": deregister_from_pb,
    "abort_epoch": lambda m: c.AbortEpoch(m.group, m.epoch, m.reason),
    "garbage_collect": garbage_collect_from_pb,
    "delete_group": delete_group_from_pb,
    "read_barrier": lambda m: c.ReadBarrier(),
    "reset_dedupe_clock": reset_dedupe_clock_from_pb,
    "create_savepoint": create_savepoint_from_pb,
    "delete_savepoint": delete_savepoint_from_pb,
    "set_retention": set_retention_from_pb,
    "restore_group": restore_group_from_pb,
    "fork_group": fork_group_from_pb,
}


def command_from_pb(entry: log_pb2.LogEntry) -> c.Command:
    """Decode the command of a log entry; raises Rejection for a malformed one."""
    kind = entry.WhichOneof("command")
    decode = _COMMAND_FROM_PB.get(kind) if kind else None
    if decode is None:
        raise Rejection.because(ReasonCode.MALFORMED_ENTRY, "log entry carries no command", "command")
    return decode(getattr(entry, kind))


def entry_from_pb(msg: log_pb2.LogEntry, proposed_at: float) -> c.Entry:
    """Raises Rejection for a malformed command."""
    principal = principal_from_pb(msg.principal) if msg.HasField("principal") else None
    return c.Entry(msg.request_id, proposed_at, command_from_pb(msg), msg.issued_at, principal)


def proposal_from_bytes(data: bytes) -> c.Proposal:
    """Decode a Raft entry; raises for bytes that are no LogEntry at all."""
    msg = log_pb2.LogEntry.FromString(data)
    if msg.WhichOneof("command") != "batch":
        return c.Proposal(msg.proposed_at, msg.dedupe_window_s, (_entry_or_failure(msg, msg.proposed_at),))
    return c.Proposal(msg.proposed_at, msg.dedupe_window_s,
                      tuple(_entry_or_failure(m, msg.proposed_at) for m in msg.batch.entries), batch=True)


def _entry_or_failure(msg: log_pb2.LogEntry, proposed_at: float) -> c.Entry | c.Failure:
    if msg.WhichOneof("command") == "batch":
        return c.Failure.of(Rejection.because(ReasonCode.MALFORMED_ENTRY, "batches do not nest", "command"))
    try:
        return entry_from_pb(msg, proposed_at)
    except Rejection as rejection:
        return c.Failure.of(rejection)


# ---- core -> protobuf ------------------------------------------------------------

def spec_to_pb(spec: GroupSpec) -> pb.GroupSpec:
    return pb.GroupSpec(group=spec.name, mode=MODE_TO_PB[spec.mode], retention=spec.retention,
                        checkpoint_interval_s=spec.checkpoint_interval_s, checkpoint_cost_s=spec.checkpoint_cost_s,
                        mtbf_s=spec.mtbf_s, lease_ttl_s=spec.lease_ttl_s, epoch_timeout_s=spec.epoch_timeout_s)


def retention_policy_to_pb(policy: RetentionPolicy) -> pb.RetentionPolicy:
    return pb.RetentionPolicy(keep_last=policy.keep_last, bucket_seconds=policy.bucket_seconds,
                              buckets=policy.buckets)


def group_to_pb(group: Group) -> pb.Group:
    return pb.Group(spec=spec_to_pb(group.spec), state=GROUP_STATE_TO_PB[group.state],
                    current_epoch=group.current_epoch, stable_epoch=group.stable_epoch, members=list(group.members),
                    created_at=group.created_at, recovery_id=group.recovery_id,
                    retention_policy=retention_policy_to_pb(group.retention_policy))


def agent_to_pb(agent: Agent) -> pb.Agent:
    return pb.Agent(group=agent.group, agent_id=agent.agent_id, incarnation=agent.incarnation,
                    state=AGENT_STATE_TO_PB[agent.state], registered_at=agent.registered_at,
                    last_checkpoint_index=agent.last_checkpoint_index, generation=agent.generation)


def checkpoint_to_pb(cp: Checkpoint) -> pb.CheckpointMeta:
    fields = {name: getattr(cp, name) for name in _CHECKPOINT_FIELDS}
    fields["kind"] = KIND_TO_PB[cp.kind]
    return pb.CheckpointMeta(**fields)


def epoch_to_pb(epoch: Epoch) -> pb.Epoch:
    return pb.Epoch(group=epoch.group, epoch=epoch.epoch, state=EPOCH_STATE_TO_PB[epoch.state],
                    members=list(epoch.members), committed=list(epoch.committed), started_at=epoch.started_at,
                    deadline=epoch.deadline, reason=epoch.reason)


def order_to_pb(order: Order) -> pb.Order:
    msg = pb.Order(order_id=order.order_id, group=order.group, agent_id=order.agent_id, acked=order.acked)
    if order.kind is OrderKind.ROLL_BACK:
        msg.roll_back.CopyFrom(pb.RollBack(
            checkpoint_index=order.checkpoint_index, recovery_id=order.recovery_id, generation=order.generation,
            line=[pb.RollbackTarget(agent_id=f.agent_id, checkpoint_index=f.index, generation=f.generation)
                  for f in order.line]))
    elif order.kind is OrderKind.CHECKPOINT_NOW:
        msg.checkpoint_now.CopyFrom(pb.CheckpointNow(epoch=order.epoch))
    else:
        msg.checkpoint_suggested.CopyFrom(pb.CheckpointSuggested(interval_s=order.interval_s))
    return msg


def savepoint_to_pb(savepoint: Savepoint) -> pb.Savepoint:
    return pb.Savepoint(group=savepoint.group, name=savepoint.name, epoch=savepoint.epoch, labels=savepoint.labels,
                        created_at=savepoint.created_at,
                        checkpoints=[pb.SavedCheckpoint(agent_id=s.agent_id, index=s.index)
                                     for s in savepoint.checkpoints])


def restored_to_pb(result: c.RestoreResult, dry_run: bool) -> pb.RestoreGroupResponse:
    return pb.RestoreGroupResponse(recovery_id=result.recovery_id, epoch=result.epoch, dry_run=dry_run, steps=[
        pb.RestoreStep(agent_id=s.agent_id, checkpoint_index=s.checkpoint_index, intervals_lost=s.intervals_lost,
                       checkpoints_lost=list(s.checkpoints_lost), sends_undone=s.sends_undone,
                       receives_undone=s.receives_undone)
        for s in result.steps])


def forked_to_pb(result: c.ForkResult) -> pb.ForkGroupResponse:
    return pb.ForkGroupResponse(group=group_to_pb(result.group),
                                checkpoints=[checkpoint_to_pb(cp) for cp in result.checkpoints])


def dependency_to_pb(dep: Dependency) -> pb.DependencyRecord:
    return pb.DependencyRecord(sender=dep.sender, send_interval=dep.send_interval, receiver=dep.receiver,
                               receive_interval=dep.receive_interval, message_id=dep.message_id,
                               send_generation=dep.send_generation)


def token_to_pb(token: c.Token) -> pb.FencingToken:
    return pb.FencingToken(incarnation=token.incarnation, epoch=token.epoch, secret=bytes.fromhex(token.secret_hash))


def entry_to_pb(entry: c.Entry) -> log_pb2.LogEntry:
    """The log entry of a command, without the proposal's time and window (proposal_to_pb).

    The inverse of entry_from_pb for every command the *_from_pb decoders produce:
    the leader applies the Entry it holds and followers apply the decoded bytes, so
    a field lost on the way would split their states. Embedded requests repeat the
    entry's request id, as the requests that carried them did.
    """
    msg = log_pb2.LogEntry(request_id=entry.request_id, issued_at=entry.issued_at)
    if entry.principal is not None:
        msg.principal.CopyFrom(principal_to_pb(entry.principal))
    rid = entry.request_id
    match entry.command:
        case c.CreateGroup(spec=spec):
            msg.create_group.CopyFrom(pb.CreateGroupRequest(request_id=rid, spec=spec_to_pb(spec)))
        case c.Register(group=group, agent_id=agent_id, secret_hash=secret_hash):
            msg.register.CopyFrom(pb.RegisterRequest(request_id=rid, group=group, agent_id=agent_id,
                                                     secret=bytes.fromhex(secret_hash)))
        case c.CommitCheckpoint(token=token, checkpoint=cp):
            msg.commit_checkpoint.CopyFrom(pb.CommitCheckpointRequest(
                request_id=rid, token=token_to_pb(token), checkpoint=checkpoint_to_pb(cp)))
        case c.ReportDependencies(group=group, agent_id=agent_id, token=token, records=records):
            msg.report_dependencies.CopyFrom(pb.ReportDependenciesRequest(
                request_id=rid, group=group, agent_id=agent_id, token=token_to_pb(token),
                records=[dependency_to_pb(r) for r in records]))
        case c.StartEpoch(group=group):
            msg.start_epoch.CopyFrom(pb.StartEpochRequest(request_id=rid, group=group))
        case c.DeclareAgentFailed(group=group, agent_id=agent_id, incarnation=incarnation):
            msg.declare_agent_failed.CopyFrom(log_pb2.DeclareAgentFailed(
                group=group, agent_id=agent_id, incarnation=incarnation))
        case c.AckOrder(group=group, agent_id=agent_id, token=token, order_id=order_id):
            msg.ack_order.CopyFrom(pb.AckOrderRequest(request_id=rid, group=group, agent_id=agent_id,
                                                      token=token_to_pb(token), order_id=order_id))
        case c.Deregister(group=group, agent_id=agent_id, token=token):
            msg.deregister.CopyFrom(pb.DeregisterRequest(request_id=rid, group=group, agent_id=agent_id,
                                                         token=token_to_pb(token)))
        case c.AbortEpoch(group=group, epoch=epoch, reason=reason):
            msg.abort_epoch.CopyFrom(log_pb2.AbortEpoch(group=group, epoch=epoch, reason=reason))
        case c.GarbageCollect(group=group, blob_store=blob_store):
            msg.garbage_collect.CopyFrom(pb.GarbageCollectRequest(request_id=rid, group=group, blob_store=blob_store))
        case c.DeleteGroup(group=group):
            msg.delete_group.CopyFrom(pb.DeleteGroupRequest(request_id=rid, group=group))
        case c.ReadBarrier():
            msg.read_barrier.SetInParent()
        case c.ResetDedupeClock():
            msg.reset_dedupe_clock.CopyFrom(pb.ResetDedupeClockRequest(request_id=rid))
        case c.CreateSavepoint(group=group, name=name, labels=labels):
            msg.create_savepoint.CopyFrom(pb.CreateSavepointRequest(request_id=rid, group=group, name=name,
                                                                    labels=labels))
        case c.DeleteSavepoint(group=group, name=name):
            msg.delete_savepoint.CopyFrom(pb.DeleteSavepointRequest(request_id=rid, group=group, name=name))
        case c.SetRetention(group=group, policy=policy):
            msg.set_retention.CopyFrom(pb.SetRetentionRequest(request_id=rid, group=group,
                                                              policy=retention_policy_to_pb(policy)))
        case c.RestoreGroup(group=group, savepoint=savepoint, containing=containing):
            msg.restore_group.CopyFrom(pb.RestoreGroupRequest(
                request_id=rid, group=group, savepoint=savepoint,
                containing=[pb.SavedCheckpoint(agent_id=s.agent_id, index=s.index) for s in containing]))
        case c.ForkGroup(group=group, savepoint=savepoint, into=into, copies=copies, agents=agents):
            msg.fork_group.CopyFrom(pb.ForkGroupRequest(
                request_id=rid, group=group, savepoint=savepoint, into=into, agents=list(agents),
                copies=[pb.ForkedCheckpoint(agent_id=f.agent_id, index=f.index, blob_uri=f.blob_uri) for f in copies]))
        case other:
            raise TypeError(f"not a command: {other!r}")
    return msg


def proposal_to_pb(proposed_at: float, dedupe_window_s: float, entries: list[log_pb2.LogEntry]) -> log_pb2.LogEntry:
    """One Raft entry for entry_to_pb's entries, as proposal_from_bytes reads it back:
    a lone entry carries the proposal's time and window itself (so it is modified), a
    batch wraps them."""
    if len(entries) == 1:
        msg = entries[0]
        msg.proposed_at, msg.dedupe_window_s = proposed_at, dedupe_window_s
        return msg
    msg = log_pb2.LogEntry(proposed_at=proposed_at, dedupe_window_s=dedupe_window_s)
    msg.batch.entries.extend(entries)
    return msg
