"""Conversion between protobuf messages (the wire and the Raft log) and core dataclasses.

The core stays stdlib-only; this is the single place that knows both shapes.
"""
from __future__ import annotations

import dataclasses

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core import commands as c
from coordinator.core.errors import Rejection
from coordinator.core.history import Dependency
from coordinator.core.model import (
    Agent, AgentState, Checkpoint, CheckpointKind, Epoch, EpochState, Group, GroupSpec, GroupState, Mode, Order,
    OrderKind,
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
    return c.Token(incarnation=msg.incarnation, epoch=msg.epoch)


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


def command_from_pb(entry: log_pb2.LogEntry) -> c.Command:
    """Decode the command of a log entry; raises Rejection for a malformed one."""
    kind = entry.WhichOneof("command")
    m = getattr(entry, kind) if kind else None
    match kind:
        case "create_group":
            return c.CreateGroup(spec_from_pb(m.spec))
        case "register":
            return c.Register(m.group, m.agent_id)
        case "commit_checkpoint":
            return c.CommitCheckpoint(token_from_pb(m.token), checkpoint_from_pb(m.checkpoint))
        case "report_dependencies":
            return c.ReportDependencies(m.group, m.agent_id, token_from_pb(m.token),
                                        tuple(dependency_from_pb(r) for r in m.records))
        case "start_epoch":
            return c.StartEpoch(m.group)
        case "declare_agent_failed":
            return c.DeclareAgentFailed(m.group, m.agent_id, m.incarnation)
        case "ack_order":
            return c.AckOrder(m.group, m.agent_id, token_from_pb(m.token), m.order_id)
        case "deregister":
            return c.Deregister(m.group, m.agent_id, token_from_pb(m.token))
        case "abort_epoch":
            return c.AbortEpoch(m.group, m.epoch, m.reason)
        case "garbage_collect":
            return c.GarbageCollect(m.group)
        case "read_barrier":
            return c.ReadBarrier()
    raise Rejection.invalid("command", "log entry carries no command")


def entry_from_pb(msg: log_pb2.LogEntry, proposed_at: float) -> c.Entry:
    """Raises Rejection for a malformed command."""
    return c.Entry(msg.request_id, proposed_at, command_from_pb(msg), msg.issued_at)


def proposal_from_bytes(data: bytes) -> c.Proposal:
    """Decode a Raft entry; raises for bytes that are no LogEntry at all."""
    msg = log_pb2.LogEntry.FromString(data)
    if msg.WhichOneof("command") != "batch":
        return c.Proposal(msg.proposed_at, msg.dedupe_window_s, (_entry_or_failure(msg, msg.proposed_at),))
    return c.Proposal(msg.proposed_at, msg.dedupe_window_s,
                      tuple(_entry_or_failure(m, msg.proposed_at) for m in msg.batch.entries), batch=True)


def _entry_or_failure(msg: log_pb2.LogEntry, proposed_at: float) -> c.Entry | c.Failure:
    if msg.WhichOneof("command") == "batch":
        return c.Failure.of(Rejection.invalid("command", "batches do not nest"))
    try:
        return entry_from_pb(msg, proposed_at)
    except Rejection as rejection:
        return c.Failure.of(rejection)


# ---- core -> protobuf ------------------------------------------------------------

def spec_to_pb(spec: GroupSpec) -> pb.GroupSpec:
    return pb.GroupSpec(group=spec.name, mode=MODE_TO_PB[spec.mode], retention=spec.retention,
                        checkpoint_interval_s=spec.checkpoint_interval_s, checkpoint_cost_s=spec.checkpoint_cost_s,
                        mtbf_s=spec.mtbf_s, lease_ttl_s=spec.lease_ttl_s, epoch_timeout_s=spec.epoch_timeout_s)


def group_to_pb(group: Group) -> pb.Group:
    return pb.Group(spec=spec_to_pb(group.spec), state=GROUP_STATE_TO_PB[group.state],
                    current_epoch=group.current_epoch, stable_epoch=group.stable_epoch, members=list(group.members),
                    created_at=group.created_at, recovery_id=group.recovery_id)


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


def dependency_to_pb(dep: Dependency) -> pb.DependencyRecord:
    return pb.DependencyRecord(sender=dep.sender, send_interval=dep.send_interval, receiver=dep.receiver,
                               receive_interval=dep.receive_interval, message_id=dep.message_id,
                               send_generation=dep.send_generation)
