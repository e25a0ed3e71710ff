"""The metadata workload's requests, and what the history records about each.

This is the contract between the workload and chaos.checker. Every operation's
invoke value carries the request id as "rid" (reads get one too, unique) plus the
request's essential fields; a deliberate re-send of a completed request adds
"retry_of" (the original invoke's op index). The ok value holds the response's
essential fields. Enums are recorded by their protobuf names (e.g. "EPOCH_STABLE").

| f                | invoke value                                              | ok value                                   |
|------------------|-----------------------------------------------------------|--------------------------------------------|
| create_group     | group, mode, checkpoint_interval_s, checkpoint_cost_s, mtbf_s, lease_ttl_s, retention | current_epoch, stable_epoch |
| register         | group, agent                                              | incarnation, current_epoch, stable_epoch, recovery_id |
| commit           | group, agent, incarnation, epoch, index, kind, blob_uri, sha256 | index, epoch, stable, stable_epoch, incarnation, created_at, blob_uri, sha256 |
| report_deps      | group, agent, incarnation, deps: [[sender, send_interval, receiver, receive_interval, message_id]], send_generations: [each dep's] | accepted |
| start_epoch      | group                                                     | epoch: {epoch, state, members, committed}  |
| ack_order        | group, agent, incarnation, order_id                       | group_state                                |
| gc               | group                                                     | uris, bytes                                |
| get_group        | group                                                     | current_epoch, stable_epoch, state, recovery_id, agents: {id: {incarnation, state, last_index}}, epochs: [epoch] |
| list_checkpoints | group                                                     | checkpoints: [{agent, index, epoch, blob_uri, sha256, stable, created_at}] |
| watch_orders     | group, agent                                              | orders: [{order_id, kind, checkpoint_index, recovery_id, epoch}] |
| what_if          | group, failed                                             | targets: {agent: checkpoint_index}         |
"""
from __future__ import annotations

import hashlib
from typing import Any

from chaos.client import Request
from coordinator.api.v1 import coordinator_pb2 as pb

# The workload's agents all register with this secret: the workload checks the
# coordinator's metadata rules, not the secrecy of one agent from another.
SECRET = b"metadata-workload-secret"
WRITES = frozenset({"create_group", "register", "commit", "report_deps", "start_epoch", "ack_order", "gc"})
AGENT, ADMIN = "AgentService", "AdminService"


def epoch_value(e: pb.Epoch) -> dict[str, Any]:
    return {"epoch": e.epoch, "state": pb.EpochState.Name(e.state), "members": sorted(e.members),
            "committed": sorted(e.committed)}


def create_group(rid: str, spec: pb.GroupSpec) -> Request:
    value = {"rid": rid, "group": spec.group, "mode": pb.GroupMode.Name(spec.mode),
             "checkpoint_interval_s": spec.checkpoint_interval_s, "checkpoint_cost_s": spec.checkpoint_cost_s,
             "mtbf_s": spec.mtbf_s, "lease_ttl_s": spec.lease_ttl_s, "retention": spec.retention}
    return Request("create_group", ADMIN, "CreateGroup", pb.CreateGroupRequest(request_id=rid, spec=spec), value,
                   lambda r: {"current_epoch": r.group.current_epoch, "stable_epoch": r.group.stable_epoch})


def register(rid: str, group: str, agent: str) -> Request:
    return Request("register", AGENT, "Register",
                   pb.RegisterRequest(secret=SECRET, request_id=rid, group=group, agent_id=agent),
                   {"rid": rid, "group": group, "agent": agent},
                   lambda r: {"incarnation": r.incarnation, "current_epoch": r.current_epoch,
                              "stable_epoch": r.stable_epoch, "recovery_id": r.recovery_id})


def commit(rid: str, group: str, agent: str, incarnation: int, index: int, epoch: int, kind: int) -> Request:
    uri = f"mem://{group}/{agent}/{index}/{rid}"  # unique: a collected blob names one checkpoint
    sha = hashlib.sha256(uri.encode()).hexdigest()
    message = pb.CommitCheckpointRequest(
        request_id=rid, token=pb.FencingToken(secret=SECRET, incarnation=incarnation, epoch=epoch),
        checkpoint=pb.CheckpointMeta(group=group, agent_id=agent, index=index, epoch=epoch, kind=kind,
                                     blob_uri=uri, sha256=sha, size=100 + index))
    value = {"rid": rid, "group": group, "agent": agent, "incarnation": incarnation, "epoch": epoch,
             "index": index, "kind": pb.CheckpointKind.Name(kind), "blob_uri": uri, "sha256": sha}
    return Request("commit", AGENT, "CommitCheckpoint", message, value, _commit_answer)


def _commit_answer(r: pb.CommitCheckpointResponse) -> dict[str, Any]:
    c = r.checkpoint
    return {"index": c.index, "epoch": c.epoch, "stable": c.stable, "stable_epoch": r.stable_epoch,
            "incarnation": c.incarnation, "created_at": c.created_at, "blob_uri": c.blob_uri, "sha256": c.sha256}


def report_deps(rid: str, group: str, agent: str, incarnation: int, deps: list[tuple[str, int, str, int, str]],
                send_generations: list[int] | None = None) -> Request:
    """`send_generations`: each sender's generation at its send (absent: 0, the oldest,
    which every rollback of the sender undoes)."""
    generations = list(send_generations or [0] * len(deps))
    if len(generations) != len(deps):
        raise ValueError(f"{len(deps)} dependencies but {len(generations)} send generations")
    records = [pb.DependencyRecord(sender=s, send_interval=si, receiver=r, receive_interval=ri, message_id=m,
                                   send_generation=gen) for (s, si, r, ri, m), gen in zip(deps, generations)]
    message = pb.ReportDependenciesRequest(request_id=rid, group=group, agent_id=agent,
                                           token=pb.FencingToken(secret=SECRET, incarnation=incarnation),
                                           records=records)
    value = {"rid": rid, "group": group, "agent": agent, "incarnation": incarnation, "deps": [list(d) for d in deps],
             "send_generations": generations}
    return Request("report_deps", AGENT, "ReportDependencies", message, value, lambda r: {"accepted": r.accepted})


def start_epoch(rid: str, group: str) -> Request:
    return Request("start_epoch", ADMIN, "StartEpoch", pb.StartEpochRequest(request_id=rid, group=group),
                   {"rid": rid, "group": group}, lambda r: {"epoch": epoch_value(r.epoch)})


def ack_order(rid: str, group: str, agent: str, incarnation: int, order_id: int) -> Request:
    message = pb.AckOrderRequest(request_id=rid, group=group, agent_id=agent,
                                 token=pb.FencingToken(secret=SECRET, incarnation=incarnation), order_id=order_id)
    return Request("ack_order", AGENT, "AckOrder", message,
                   {"rid": rid, "group": group, "agent": agent, "incarnation": incarnation, "order_id": order_id},
                   lambda r: {"group_state": pb.GroupState.Name(r.group_state)})


def gc(rid: str, group: str) -> Request:
    return Request("gc", ADMIN, "GarbageCollect", pb.GarbageCollectRequest(request_id=rid, group=group),
                   {"rid": rid, "group": group},
                   lambda r: {"uris": sorted(r.deletable_blob_uris), "bytes": r.bytes})


def get_group(rid: str, group: str) -> Request:
    return Request("get_group", ADMIN, "GetGroup", pb.GetGroupRequest(group=group), {"rid": rid, "group": group},
                   _group_answer)


def _group_answer(r: pb.GetGroupResponse) -> dict[str, Any]:
    g = r.group
    return {"current_epoch": g.current_epoch, "stable_epoch": g.stable_epoch, "state": pb.GroupState.Name(g.state),
            "recovery_id": g.recovery_id,
            "agents": {a.agent_id: {"incarnation": a.incarnation, "state": pb.AgentState.Name(a.state),
                                    "last_index": a.last_checkpoint_index} for a in r.agents},
            "epochs": [epoch_value(e) for e in r.recent_epochs]}


def list_checkpoints(rid: str, group: str) -> Request:
    return Request("list_checkpoints", ADMIN, "ListCheckpoints", pb.ListCheckpointsRequest(group=group),
                   {"rid": rid, "group": group},
                   lambda r: {"checkpoints": [{"agent": c.agent_id, "index": c.index, "epoch": c.epoch,
                                               "blob_uri": c.blob_uri, "sha256": c.sha256, "stable": c.stable,
                                               "created_at": c.created_at} for c in r.checkpoints]})


def watch_orders(rid: str, group: str, agent: str, incarnation: int, window: float) -> Request:
    message = pb.WatchOrdersRequest(group=group, agent_id=agent,
                                    token=pb.FencingToken(secret=SECRET, incarnation=incarnation))
    return Request("watch_orders", AGENT, "WatchOrders", message, {"rid": rid, "group": group, "agent": agent},
                   lambda orders: {"orders": [_order_value(o) for o in orders]}, window=window)


def _order_value(o: pb.Order) -> dict[str, Any]:
    kind = o.WhichOneof("kind")
    return {"order_id": o.order_id, "kind": kind, "checkpoint_index": o.roll_back.checkpoint_index,
            "recovery_id": o.roll_back.recovery_id, "epoch": o.checkpoint_now.epoch}


def what_if(rid: str, group: str, failed: list[str]) -> Request:
    return Request("what_if", ADMIN, "WhatIf", pb.WhatIfRequest(group=group, failed=failed),
                   {"rid": rid, "group": group, "failed": sorted(failed)},
                   lambda r: {"targets": {t.agent_id: t.checkpoint_index for t in r.targets}})


def intrude(rid: str, identity: str, service: str, method: str, message: Any, target: str) -> Request:
    """A write by an identity whose role does not allow it: it must be refused. The
    group it aims at is `target`, not "group", so it counts as none of the group's requests."""
    return Request("intrude", service, method, message, {"rid": rid, "as": identity, "rpc": method, "target": target})
