"""Each agent operation once, for both ways an agent reaches it.

A unary RPC (servicers.AgentServicer) and a frame on an agent's session stream
(agent_session.py) call the same method here, which runs the admission, validation,
fencing and proposal and either returns the response message or raises Refused. The
unary call ends with the refusal as its status; the session answers the frame with it.
Nothing here knows which path it serves, so the two cannot drift apart.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import ids, queries
from coordinator.core.errors import Rejection
from coordinator.core.model import Agent, Order, OrderKind
from coordinator.observability import metrics
from coordinator.storage.state import KvState
from coordinator.transport.leases import Leases
from coordinator.transport.order_wakeups import Subscription
from coordinator.transport.proposer import Proposer
from coordinator.transport.status_map import Refused

# An agent operation: `(request, issued_at) -> response`, what both a unary RPC and a
# session frame call.
AgentOperation = Callable[[Any, "str | None"], Awaitable[Any]]


def check_ids(*checks: tuple[str, str]) -> None:
    """Raises Refused for the first id that breaks its format."""
    try:
        for value, field in checks:
            ids.check_id(value, field)
    except Rejection as r:
        raise Refused.of(r) from None


def live_agent(state: KvState, request: Any) -> Agent:
    """The agent a request names, if its token holds the live incarnation; else Refused."""
    try:
        return queries.live_agent(state, request.group, request.agent_id, wire.token_from_pb(request.token))
    except Rejection as r:
        raise Refused.of(r) from None


class AgentOps:
    """The agent operations, as `op(request, issued_at) -> response`: `issued_at` is the
    client's first-send time as it sent it (None: not sent), which only writes read."""

    def __init__(self, proposer: Proposer, leases: Leases) -> None:
        self.p = proposer
        self.leases = leases

    async def register(self, request: pb.RegisterRequest, issued_at: str | None) -> pb.RegisterResponse:
        result = await self.p.propose(request, wire.register_from_pb, issued_at)
        self.leases.renew(result.group, result.agent.agent_id, result.agent.incarnation)
        resume = wire.checkpoint_to_pb(result.resume_from) if result.resume_from else None
        return pb.RegisterResponse(incarnation=result.agent.incarnation, mode=wire.MODE_TO_PB[result.group.spec.mode],
                                   current_epoch=result.group.current_epoch, lease_ttl_s=result.group.spec.lease_ttl_s,
                                   stable_epoch=result.group.stable_epoch, resume_from=resume,
                                   generation=result.agent.generation, recovery_id=result.group.recovery_id)

    async def keepalive(self, request: pb.HeartbeatRequest, issued_at: str | None = None) -> pb.HeartbeatResponse:
        """The agent operation of the Heartbeat RPC (the proto keeps that name)."""
        return self.keepalive_now(request)

    def keepalive_now(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        """A keepalive's work, synchronous: it reads only the leader's applied state and never
        waits, so a session answers it where it reads the frame (AgentSession._keepalive)."""
        check_ids((request.group, "group"), (request.agent_id, "agent_id"))
        self.p.require_leader()
        # Not linearizable on purpose: a heartbeat must stay cheap, and a stale read
        # can only renew the lease of an incarnation the log has just replaced.
        state = self.p.node.read_state()
        agent = live_agent(state, request)
        group = state.group(request.group)
        assert group is not None  # an agent is only stored under its group
        self.leases.renew(group, agent.agent_id, agent.incarnation)
        return pb.HeartbeatResponse(current_epoch=group.current_epoch, state=wire.GROUP_STATE_TO_PB[group.state],
                                    lease_ttl_s=group.spec.lease_ttl_s, rollback_floor=agent.rollback_floor)

    async def commit_checkpoint(self, request: pb.CommitCheckpointRequest,
                                issued_at: str | None) -> pb.CommitCheckpointResponse:
        result = await self.p.propose(request, wire.commit_checkpoint_from_pb, issued_at)
        metrics.CHECKPOINTS.labels(result.checkpoint.kind.value).inc()
        return pb.CommitCheckpointResponse(checkpoint=wire.checkpoint_to_pb(result.checkpoint),
                                           stable_epoch=result.stable_epoch)

    async def report_dependencies(self, request: pb.ReportDependenciesRequest,
                                  issued_at: str | None) -> pb.ReportDependenciesResponse:
        result = await self.p.propose(request, wire.report_dependencies_from_pb, issued_at)
        return pb.ReportDependenciesResponse(accepted=result.accepted)

    async def ack_order(self, request: pb.AckOrderRequest, issued_at: str | None) -> pb.AckOrderResponse:
        result = await self.p.propose(request, wire.ack_order_from_pb, issued_at)
        return pb.AckOrderResponse(group_state=wire.GROUP_STATE_TO_PB[result.group_state])

    async def deregister(self, request: pb.DeregisterRequest, issued_at: str | None) -> pb.DeregisterResponse:
        await self.p.propose(request, wire.deregister_from_pb, issued_at)
        self.leases.forget(request.group, request.agent_id)
        return pb.DeregisterResponse()

    # ---- orders ---------------------------------------------------------------------
    async def open_watch(self, request: pb.WatchOrdersRequest) -> None:
        """Before an order stream's first read: its ids, and one barrier per stream, not
        per read: it proves leadership and makes the first batch linearizable without a
        log entry per wake-up; later reads see the leader's applied state, which only
        moves forward."""
        check_ids((request.group, "group"), (request.agent_id, "agent_id"))
        await self.p.read_point()

    def new_orders(self, request: pb.WatchOrdersRequest, wake: Subscription, sent: set[int]) -> list[pb.Order]:
        """The watcher's orders not yet sent on its stream, among those it was woken for
        (all of the agent's on its first read), read once from the leader's applied state;
        the caller pushes them at once, so rollback orders are timed as delivered here.

        The watcher's token must hold the agent's live incarnation, checked at every read:
        a replaced (zombie) or failed incarnation that carried out the new incarnation's
        rollback order would take the order's generation, and the sends it makes afterwards
        would escape the rollback's fence. Raises Refused for that, and when this node no
        longer leads."""
        wanted = wake.take()
        self.p.require_leader()
        state = self.p.node.read_state()
        live_agent(state, request)
        if wanted is None:
            found: list[Order] = [o for o in state.orders(request.group) if o.agent_id == request.agent_id]
        else:
            found = [o for o in map(lambda i: state.order(request.group, i), sorted(wanted))
                     if o is not None and o.agent_id == request.agent_id]
        fresh = [o for o in found if o.order_id not in sent]
        sent.update(o.order_id for o in fresh)
        wake.rollbacks_sent(o.order_id for o in fresh if o.kind is OrderKind.ROLL_BACK)
        return [wire.order_to_pb(o) for o in fresh]
