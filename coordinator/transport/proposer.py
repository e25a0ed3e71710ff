"""The RPC face of the Batcher: admit a request, then end the call with its outcome.

Admission checks what only the RPC carries (the request id and the client's
issued-at metadata); the command itself is checked by the Batcher. Every way a
proposal can end maps to one status here: the result, a refusal with its reason,
a redirect to the leader, or "outcome unknown, retry with the same request_id".
The caller's gRPC deadline needs no code: gRPC cancels the handler, and with it
the wait for the result, when it passes.
"""
from __future__ import annotations

import math
from typing import Awaitable, Callable, Protocol, TypeVar

import grpc

from coordinator.core import ids
from coordinator.core.commands import Command, Entry, Failure, Result
from coordinator.core.errors import ReasonCode, Rejection, shown
from coordinator.replication.batcher import Batcher, OutcomeUnknown
from coordinator.replication.replica import NotLeader, Overloaded
from coordinator.api.metadata import ISSUED_AT_METADATA_KEY
from coordinator.transport import auth
from coordinator.transport.status_map import Refused


class WriteRequest(Protocol):
    """A request that proposes one command: it names its request id."""

    request_id: str


R = TypeVar("R", bound=WriteRequest)
T = TypeVar("T")


class Proposer:
    def __init__(self, batcher: Batcher) -> None:
        self.batcher = batcher
        self.node = batcher.replica

    def not_leader(self, leader_raft: str | None) -> Refused:
        """UNAVAILABLE, naming the leader's gRPC address when this node knows it."""
        leader = self.node.config.grpc_of(leader_raft)
        return Refused(grpc.StatusCode.UNAVAILABLE, f"not the leader; leader is {leader or 'unknown'}", leader=leader)

    def require_leader(self) -> None:
        """Raises not_leader() unless this node leads (a cheap local check, no barrier)."""
        if not self.node.is_leader():
            raise self.not_leader(self.node.leader_raft_address())

    async def abort_not_leader(self, context: grpc.aio.ServicerContext, leader_raft: str | None) -> None:
        await self.not_leader(leader_raft).abort(context)

    async def submit(self, context: grpc.aio.ServicerContext, request: R,
                     to_command: Callable[[R], Command]) -> Result:
        """Admit, decode, propose and await; aborts the RPC on anything but success."""
        try:
            return await self.propose(request, to_command, issued_at_metadata(context))
        except Refused as r:
            await r.abort(context)
        raise AssertionError("context.abort returned")

    async def propose(self, request: R, to_command: Callable[[R], Command], issued_at: str | None) -> Result:
        """Admit, decode, propose and await; raises Refused on anything but success.
        `issued_at`: the client's first-send time as sent (metadata or session frame)."""
        async def propose() -> Result:
            ids.check_request_id(request.request_id)
            command, issued = to_command(request), self._issued_at(issued_at)
            self.require_leader()  # bad input is refused as such anywhere; a follower batches nothing
            # The grant admission found (transport.auth): the state machine re-checks it.
            return await self.batcher.propose(Entry(request.request_id, 0.0, command, issued, auth.PRINCIPAL.get()))

        result = await self._outcome(propose())
        if isinstance(result, Failure):
            raise Refused.of(result)
        return result

    async def barrier(self, context: grpc.aio.ServicerContext) -> None:
        """A linearizable read point (Batcher.barrier); aborts the RPC when there is none."""
        try:
            await self.read_point()
        except Refused as r:
            await r.abort(context)

    async def read_point(self) -> None:
        """A linearizable read point (Batcher.barrier); raises Refused when there is none.

        Chaos seam: `stale-read` (chaos/planted.py) replaces it with one that checks nothing."""
        self.require_leader()
        await self._outcome(self.batcher.barrier())

    async def _outcome(self, proposal: Awaitable[T]) -> T:
        """The one place a proposal's exceptions become statuses."""
        try:
            return await proposal
        except Rejection as r:
            raise Refused.of(r) from None
        except NotLeader as exc:
            raise self.not_leader(exc.leader_raft) from None
        except Overloaded as exc:
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except OutcomeUnknown as exc:
            raise Refused(grpc.StatusCode.UNAVAILABLE,
                          f"outcome unknown ({exc}); retry with the same request_id") from None

    def _issued_at(self, raw: str | None) -> float:
        """The client's first-send time; 0 when absent.

        Raises Rejection for a value that is no time, or one further ahead of this
        node's clock than the dedupe window (its answer would be forgotten too early)."""
        if raw is None:
            return 0.0
        try:
            issued_at = float(raw)
        except ValueError:
            issued_at = math.nan
        if not (math.isfinite(issued_at) and issued_at > 0):
            raise Rejection.invalid(ISSUED_AT_METADATA_KEY, f"must be seconds since the epoch, got {shown(raw)}")
        window = self.batcher.dedupe_window_s
        if issued_at > self.batcher.clock.now() + window:
            raise Rejection.because(ReasonCode.CLOCK_AHEAD, f"more than {window:.0f}s ahead of the coordinator's "
                                    "clock; check the client's clock", ISSUED_AT_METADATA_KEY)
        return issued_at


def issued_at_metadata(context: grpc.aio.ServicerContext) -> str | None:
    """The raw `raftpoint-issued-at` value a unary call carries, if any."""
    return next((v for k, v in context.invocation_metadata() or () if k == ISSUED_AT_METADATA_KEY), None)
