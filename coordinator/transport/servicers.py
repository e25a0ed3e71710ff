"""gRPC servicers: thin translations between protobuf and proposals/reads."""
from __future__ import annotations

import logging

import grpc

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.core import paging, queries, restore, validation
from coordinator.core.commands import RestoreResult
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.model import RECENT_EPOCHS
from coordinator.observability import metrics
from coordinator.storage.digest import CONTENT_LAYOUT
from coordinator.transport.admission import Admission
from coordinator.transport.heavy_reads import HeavyReads
from coordinator.transport import membership, snapshot_export
from coordinator.transport.agent_ops import AgentOperation, AgentOps, check_ids
from coordinator.transport.agent_session import AgentSession
from coordinator.transport.leases import Leases
from coordinator.transport.order_wakeups import OrderWakeups
from coordinator.transport.proposer import Proposer, issued_at_metadata
from coordinator.transport.status_map import Refused, abort_with

log = logging.getLogger(__name__)


async def _check(context: grpc.aio.ServicerContext, *checks: tuple[str, str]) -> None:
    try:
        check_ids(*checks)
    except Refused as r:
        await r.abort(context)


def _freed(result) -> pb.GarbageCollectResponse:
    """GarbageCollect's and DeleteGroup's answer: the blobs nothing refers to any more."""
    return pb.GarbageCollectResponse(deletable_blob_uris=list(result.deletable_blob_uris), bytes=result.bytes)


class AgentServicer(pb_grpc.AgentServiceServicer):
    """Agent RPCs: each unary method and each session frame runs the same AgentOps
    operation (agent_ops.py); only how a refusal is sent differs."""

    def __init__(self, proposer: Proposer, leases: Leases, wakeups: OrderWakeups,
                 admission: Admission | None = None) -> None:
        self.p = proposer
        self.ops = AgentOps(proposer, leases)
        self.wakeups = wakeups
        self.admission = admission  # sheds a session's frames as the interceptor sheds unary calls

    @staticmethod
    async def _unary(context: grpc.aio.ServicerContext, op: AgentOperation, request):
        try:
            return await op(request, issued_at_metadata(context))
        except Refused as r:
            await r.abort(context)

    async def Register(self, request, context):
        return await self._unary(context, self.ops.register, request)

    async def Heartbeat(self, request, context):
        return await self._unary(context, self.ops.keepalive, request)

    async def CommitCheckpoint(self, request, context):
        return await self._unary(context, self.ops.commit_checkpoint, request)

    async def ReportDependencies(self, request, context):
        return await self._unary(context, self.ops.report_dependencies, request)

    async def AckOrder(self, request, context):
        return await self._unary(context, self.ops.ack_order, request)

    async def Deregister(self, request, context):
        return await self._unary(context, self.ops.deregister, request)

    async def WatchOrders(self, request, context):
        """Stream this agent's pending orders; an order is re-sent on every new stream
        until acknowledged, so agents must treat order ids idempotently.

        The stream reads the leader's applied state when the applier signals a change to
        this agent's orders or record (order_wakeups.py), not on a timer. The watcher's
        token must hold the agent's live incarnation, checked at every read: a replaced
        (zombie) or failed incarnation that carried out the new incarnation's rollback
        order would take the order's generation, and the sends it makes afterwards would
        escape the rollback's fence (AgentOps.new_orders)."""
        try:
            await self.ops.open_watch(request)
            sent: set[int] = set()
            with self.wakeups.subscribe(request.group, request.agent_id) as wake:
                while not context.cancelled():
                    for order in self.ops.new_orders(request, wake, sent):
                        yield order
                    await wake.wait()
        except Refused as r:
            await r.abort(context)

    async def Session(self, request_iterator, context):
        """One per agent process: the calls above as frames, orders pushed (agent_session.py)."""
        session = AgentSession(self.ops, self.wakeups, self.admission)
        context.add_done_callback(lambda _: session.end())
        try:
            async for frame in session.frames(request_iterator):
                yield frame
        except Refused as r:
            await r.abort(context)


class AdminServicer(pb_grpc.AdminServiceServicer):
    """Admin RPCs. Reads that scale with the state (a group's agents and checkpoints,
    a what-if's recovery line, the digests) run through HeavyReads, off the event loop."""

    def __init__(self, proposer: Proposer, heavy: HeavyReads, admission: Admission | None = None,
                 peer_tls: ClientTLS | None = None) -> None:
        self.p = proposer
        self.heavy = heavy
        self.peer_tls = peer_tls  # how AddNode reaches the new node's health (its own certificate)
        self.admission = admission or Admission()
        self._digests: tuple[int, tuple[int, str, str]] | None = None  # (applied index, digests at it)

    async def CreateGroup(self, request, context):
        result = await self.p.submit(context, request, wire.create_group_from_pb)
        return pb.CreateGroupResponse(group=wire.group_to_pb(result.group))

    async def StartEpoch(self, request, context):
        result = await self.p.submit(context, request, wire.start_epoch_from_pb)
        metrics.EPOCHS.labels("started").inc()
        return pb.StartEpochResponse(epoch=wire.epoch_to_pb(result.epoch))

    async def GarbageCollect(self, request, context):
        result = await self.p.submit(context, request, wire.garbage_collect_from_pb)
        metrics.GC_BYTES.inc(result.bytes)
        return _freed(result)

    async def DeleteGroup(self, request, context):
        result = await self.p.submit(context, request, wire.delete_group_from_pb)
        return _freed(result)

    async def ResetDedupeClock(self, request, context):
        result = await self.p.submit(context, request, wire.reset_dedupe_clock_from_pb)
        return pb.ResetDedupeClockResponse(clock_s=result.clock_s, previous_clock_s=result.previous_clock_s)

    async def CreateSavepoint(self, request, context):
        result = await self.p.submit(context, request, wire.create_savepoint_from_pb)
        return pb.SavepointResponse(savepoint=wire.savepoint_to_pb(result.savepoint))

    async def DeleteSavepoint(self, request, context):
        result = await self.p.submit(context, request, wire.delete_savepoint_from_pb)
        return pb.SavepointResponse(savepoint=wire.savepoint_to_pb(result.savepoint))

    async def SetRetention(self, request, context):
        result = await self.p.submit(context, request, wire.set_retention_from_pb)
        return pb.SetRetentionResponse(group=wire.group_to_pb(result.group))

    async def RestoreGroup(self, request, context):
        """A restore is proposed; its dry run answers the same plan from a linearizable
        read (core.restore.plan, the very function the state machine applies) and
        proposes nothing, so it needs no request id."""
        if not request.dry_run:
            result = await self.p.submit(context, request, wire.restore_group_from_pb)
            # Every member's later work is undone: an operator's act the log should show.
            log.info("group restored", extra={"group": request.group, "savepoint": request.savepoint,
                                              "recovery_id": result.recovery_id,
                                              "line": [(s.agent_id, s.checkpoint_index) for s in result.steps]})
            return wire.restored_to_pb(result, dry_run=False)
        command = wire.restore_group_from_pb(request)
        try:
            validation.validate(command)
        except Rejection as r:
            await abort_with(context, r)
        state, group = await self._group_state(context, request.group)

        def read() -> pb.RestoreGroupResponse:
            plan = restore.plan(state, group, command.savepoint, command.containing)
            return wire.restored_to_pb(RestoreResult(0, plan.steps, plan.epoch), dry_run=True)
        return await self.heavy.run(context, read)

    async def ForkGroup(self, request, context):
        result = await self.p.submit(context, request, wire.fork_group_from_pb)
        # A new group holding another's state: an operator's act the log should show.
        log.info("group forked", extra={"group": request.group, "savepoint": request.savepoint, "into": request.into,
                                        "checkpoints": [(cp.agent_id, cp.index) for cp in result.checkpoints]})
        return wire.forked_to_pb(result)

    async def _group_state(self, context, group_name: str):
        await _check(context, (group_name, "group"))
        await self.p.barrier(context)
        state = self.p.node.read_state()
        group = state.group(group_name)
        if group is None:
            await abort_with(context, Rejection.not_found(f"group {group_name!r}", ReasonCode.GROUP_NOT_FOUND))
        return state, group

    async def GetGroup(self, request, context):
        size, after = await self._paging(context, request, parts=1)
        state, group = await self._group_state(context, request.group)

        def read() -> pb.GetGroupResponse:
            epochs = state.epochs(request.group)[-RECENT_EPOCHS:]
            # One more than the page: whether a next page exists.
            candidates = state.agents_after(request.group, None if after is None else str(after[0]), size + 1)
            agents, token = paging.page(candidates, lambda a: (a.agent_id,), after, size)
            return pb.GetGroupResponse(group=wire.group_to_pb(group), agents=[wire.agent_to_pb(a) for a in agents],
                                       recent_epochs=[wire.epoch_to_pb(e) for e in epochs], next_page_token=token)
        return await self.heavy.run(context, read, records=min(len(group.members), size + 1) + RECENT_EPOCHS)

    async def ListCheckpoints(self, request, context):
        """Chaos seam: `stale-list` (chaos/planted.py) wraps it to answer from an old copy."""
        if request.agent_id:
            await _check(context, (request.agent_id, "agent_id"))
        size, after = await self._paging(context, request, parts=2)
        state, group = await self._group_state(context, request.group)

        def read() -> pb.ListCheckpointsResponse:
            if request.agent_id and state.agent(request.group, request.agent_id) is None:
                raise Rejection.not_found(f"agent {request.agent_id!r} in group {request.group!r}",
                                          ReasonCode.AGENT_NOT_FOUND)
            agents = [request.agent_id] if request.agent_id else list(group.members)
            cps, token = paging.page((cp for a in agents for cp in state.checkpoints(request.group, a)),
                                     lambda cp: (cp.agent_id, cp.index), after, size)
            return pb.ListCheckpointsResponse(checkpoints=[wire.checkpoint_to_pb(cp) for cp in cps],
                                              next_page_token=token)
        return await self.heavy.run(context, read)

    async def ListSavepoints(self, request, context):
        size, after = await self._paging(context, request, parts=1)
        state, _ = await self._group_state(context, request.group)

        def read() -> pb.ListSavepointsResponse:
            found, token = paging.page(state.savepoints(request.group), lambda sp: (sp.name,), after, size)
            return pb.ListSavepointsResponse(savepoints=[wire.savepoint_to_pb(sp) for sp in found],
                                             next_page_token=token)
        return await self.heavy.run(context, read)

    async def ListDependencies(self, request, context):
        size, after = await self._paging(context, request, parts=3)
        state, _ = await self._group_state(context, request.group)

        def read() -> pb.ListDependenciesResponse:
            found, token = paging.page(state.dependencies(request.group),
                                       lambda d: (d.receiver, d.receive_interval, d.message_id), after, size)
            return pb.ListDependenciesResponse(dependencies=[wire.dependency_to_pb(d) for d in found],
                                               next_page_token=token)
        return await self.heavy.run(context, read)

    async def ListGroups(self, request, context):
        size, after = await self._paging(context, request, parts=1)
        await self.p.barrier(context)
        state = self.p.node.read_state()

        def read() -> pb.ListGroupsResponse:
            groups, token = paging.page(state.groups(), lambda g: (g.spec.name,), after, size)
            return pb.ListGroupsResponse(groups=[wire.group_to_pb(g) for g in groups], next_page_token=token)
        return await self.heavy.run(context, read)

    @staticmethod
    async def _paging(context, request, parts: int) -> tuple[int, paging.Key | None]:
        """The request's page size and the key its page starts after."""
        try:
            return paging.page_size(request.page_size), paging.decode_token(request.page_token, parts)
        except Rejection as r:
            await abort_with(context, r)

    async def WhatIf(self, request, context):
        state, group = await self._group_state(context, request.group)

        def read() -> pb.WhatIfResponse:
            failed = list(request.failed)
            validation.check_failed_ids(failed)
            targets = queries.plan_for(state, request.group, failed)
            return pb.WhatIfResponse(targets=[pb.RollbackTarget(
                agent_id=t.agent_id, checkpoint_index=t.checkpoint_index, intervals_lost=t.intervals_lost)
                for t in targets])
        return await self.heavy.run(context, read)

    async def ClusterStatus(self, request, context):
        node = self.p.node
        s = node.status()
        digest_index, content_digest, state_digest = await self._digests_at(context, s.applied_index)
        return pb.ClusterStatusResponse(node=pb.NodeStatus(
            node=s.node, role=s.role, term=s.term, commit_index=s.commit_index,
            applied_index=s.applied_index, log_entries=s.log_entries, leader=s.leader,
            last_snapshot_index=s.last_snapshot_index, last_snapshot_age_s=s.last_snapshot_age_s,
            state_digest=state_digest, content_digest=content_digest, digest_index=digest_index,
            loop_lag_s=self.admission.loop_lag_s, tick_lag_s=s.tick_lag_s, content_layout=CONTENT_LAYOUT))

    async def _digests_at(self, context, applied_index: int) -> tuple[int, str, str]:
        """Both full-store digests, computed once per applied index: status is polled
        (by operators, probes, the chaos checker) far more often than the state moves."""
        cached = self._digests
        if cached is not None and cached[0] == applied_index:
            return cached[1]
        node = self.p.node

        def read() -> tuple[int, str, str]:
            digest_index, content_digest = node.digest_with_index()
            return digest_index, content_digest, node.state_digest()
        digests = await self.heavy.run(context, read)
        self._digests = (applied_index, digests)
        return digests

    async def AddNode(self, request, context):
        return await membership.change(self.p, context, request, add=True, peer_tls=self.peer_tls)

    async def RemoveNode(self, request, context):
        return await membership.change(self.p, context, request, add=False, peer_tls=self.peer_tls)

    async def SaveSnapshot(self, request, context):
        async for part in snapshot_export.stream(self.p, self.heavy, context):
            yield part
