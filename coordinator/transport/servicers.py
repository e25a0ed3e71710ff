"""gRPC servicers: thin translations between protobuf and proposals/reads."""
from __future__ import annotations

import asyncio

import grpc

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.core import ids, paging, queries, validation
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.model import RECENT_EPOCHS, Agent, Group
from coordinator.observability import metrics
from coordinator.storage.state import KvState
from coordinator.transport.admission import Admission
from coordinator.transport.heavy_reads import HeavyReads
from coordinator.transport import membership
from coordinator.transport.leases import Leases
from coordinator.transport.proposer import Proposer
from coordinator.transport.status_map import abort_with

ORDER_POLL_S = 0.2


async def _check(context: grpc.aio.ServicerContext, *checks: tuple[str, str]) -> None:
    try:
        for value, field in checks:
            ids.check_id(value, field)
    except Rejection as r:
        await abort_with(context, r)


async def _live_agent(context: grpc.aio.ServicerContext, state: KvState, request) -> tuple[Group, Agent]:
    """The group and agent a read-only agent RPC names, if its token is current."""
    try:
        agent = queries.live_agent(state, request.group, request.agent_id, wire.token_from_pb(request.token))
    except Rejection as r:
        await abort_with(context, r)
    group = state.group(request.group)
    assert group is not None  # an agent is only stored under its group
    return group, agent


def _freed(result) -> pb.GarbageCollectResponse:
    """GarbageCollect's and DeleteGroup's answer: the blobs nothing refers to any more."""
    return pb.GarbageCollectResponse(deletable_blob_uris=list(result.deletable_blob_uris), bytes=result.bytes)


class AgentServicer(pb_grpc.AgentServiceServicer):
    def __init__(self, proposer: Proposer, leases: Leases) -> None:
        self.p = proposer
        self.leases = leases

    async def Register(self, request, context):
        result = await self.p.submit(context, request, wire.register_from_pb)
        self.leases.renew(result.group, result.agent.agent_id, result.agent.incarnation)
        resume = wire.checkpoint_to_pb(result.resume_from) if result.resume_from else None
        return pb.RegisterResponse(incarnation=result.agent.incarnation, mode=wire.MODE_TO_PB[result.group.spec.mode],
                                   current_epoch=result.group.current_epoch, lease_ttl_s=result.group.spec.lease_ttl_s,
                                   stable_epoch=result.group.stable_epoch, resume_from=resume,
                                   generation=result.agent.generation, recovery_id=result.group.recovery_id)

    async def Heartbeat(self, request, context):
        await _check(context, (request.group, "group"), (request.agent_id, "agent_id"))
        node = self.p.node
        if not node.is_leader():
            await self.p.abort_not_leader(context, node.leader_raft_address())
        # Not linearizable on purpose: a heartbeat must stay cheap, and a stale read
        # can only renew the lease of an incarnation the log has just replaced.
        group, agent = await _live_agent(context, node.read_state(), request)
        self.leases.renew(group, agent.agent_id, agent.incarnation)
        return pb.HeartbeatResponse(current_epoch=group.current_epoch, state=wire.GROUP_STATE_TO_PB[group.state],
                                    lease_ttl_s=group.spec.lease_ttl_s, rollback_floor=agent.rollback_floor)

    async def CommitCheckpoint(self, request, context):
        result = await self.p.submit(context, request, wire.commit_checkpoint_from_pb)
        metrics.CHECKPOINTS.labels(result.checkpoint.kind.value).inc()
        return pb.CommitCheckpointResponse(checkpoint=wire.checkpoint_to_pb(result.checkpoint),
                                           stable_epoch=result.stable_epoch)

    async def ReportDependencies(self, request, context):
        result = await self.p.submit(context, request, wire.report_dependencies_from_pb)
        return pb.ReportDependenciesResponse(accepted=result.accepted)

    async def AckOrder(self, request, context):
        result = await self.p.submit(context, request, wire.ack_order_from_pb)
        return pb.AckOrderResponse(group_state=wire.GROUP_STATE_TO_PB[result.group_state])

    async def Deregister(self, request, context):
        await self.p.submit(context, request, wire.deregister_from_pb)
        self.leases.forget(request.group, request.agent_id)
        return pb.DeregisterResponse()

    async def WatchOrders(self, request, context):
        """Stream this agent's pending orders; an order is re-sent on every new stream
        until acknowledged, so agents must treat order ids idempotently.

        The watcher's token must hold the agent's live incarnation, checked at every
        poll: a replaced (zombie) or failed incarnation
        that carried out the new incarnation's rollback order would take the order's
        generation, and the sends it makes afterwards would escape the rollback's fence."""
        await _check(context, (request.group, "group"), (request.agent_id, "agent_id"))
        # One barrier per stream, not per poll: it proves leadership and makes the first
        # batch linearizable without adding a log entry every ORDER_POLL_S per watcher;
        # later polls read the leader's applied state, which only moves forward.
        await self.p.barrier(context)
        sent: set[int] = set()
        while not context.cancelled():
            node = self.p.node
            if not node.is_leader():
                await self.p.abort_not_leader(context, node.leader_raft_address())
            state = node.read_state()
            await _live_agent(context, state, request)
            for order in state.orders(request.group):
                if order.agent_id == request.agent_id and order.order_id not in sent:
                    sent.add(order.order_id)
                    yield wire.order_to_pb(order)
            await asyncio.sleep(ORDER_POLL_S)


class AdminServicer(pb_grpc.AdminServiceServicer):
    """Admin RPCs. Reads that scale with the state (a group's agents and checkpoints,
    a what-if's recovery line, the digests) run through HeavyReads, off the event loop."""

    def __init__(self, proposer: Proposer, heavy: HeavyReads, admission: Admission | None = None) -> None:
        self.p = proposer
        self.heavy = heavy
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
            agents, token = paging.page(state.agents(request.group), lambda a: (a.agent_id,), after, size)
            return pb.GetGroupResponse(group=wire.group_to_pb(group), agents=[wire.agent_to_pb(a) for a in agents],
                                       recent_epochs=[wire.epoch_to_pb(e) for e in epochs], next_page_token=token)
        return await self.heavy.run(context, read)

    async def ListCheckpoints(self, request, context):
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
            loop_lag_s=self.admission.loop_lag_s, tick_lag_s=s.tick_lag_s))

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
        return await membership.change(self.p, context, request, add=True)

    async def RemoveNode(self, request, context):
        return await membership.change(self.p, context, request, add=False)
