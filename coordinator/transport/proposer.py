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
from coordinator.api.metadata import ISSUED_AT_METADATA_KEY, LEADER_METADATA_KEY
from coordinator.transport import auth
from coordinator.transport.status_map import abort_with


class WriteRequest(Protocol):
    """A request that proposes one command: it names its request id."""

    request_id: str


R = TypeVar("R", bound=WriteRequest)
T = TypeVar("T")


class Proposer:
    def __init__(self, batcher: Batcher) -> None:
        self.batcher = batcher
        self.node = batcher.replica

    async def abort_not_leader(self, context: grpc.aio.ServicerContext, leader_raft: str | None) -> None:
        leader = self.node.config.grpc_of(leader_raft)
        if leader:
            context.set_trailing_metadata(((LEADER_METADATA_KEY, leader),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"not the leader; leader is {leader or 'unknown'}")

    async def submit(self, context: grpc.aio.ServicerContext, request: R,
                     to_command: Callable[[R], Command]) -> Result:
        """Admit, decode, propose and await; aborts the RPC on anything but success."""
        async def propose() -> Result:
            ids.check_request_id(request.request_id)
            issued_at = self._issued_at(context)
            # The grant admission found (transport.auth): the state machine re-checks it.
            return await self.batcher.propose(Entry(request.request_id, 0.0, to_command(request), issued_at,
                                                    auth.PRINCIPAL.get()))

        result = await self._outcome(context, propose())
        if isinstance(result, Failure):
            await abort_with(context, result)
        return result

    async def barrier(self, context: grpc.aio.ServicerContext) -> None:
        """A linearizable read point (Batcher.barrier); aborts the RPC when there is none."""
        await self._outcome(context, self.batcher.barrier())

    async def _outcome(self, context: grpc.aio.ServicerContext, proposal: Awaitable[T]) -> T:
        """The one place a proposal's exceptions become gRPC statuses."""
        try:
            return await proposal
        except Rejection as r:
            await abort_with(context, r)
        except NotLeader as exc:
            await self.abort_not_leader(context, exc.leader_raft)
        except Overloaded as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except OutcomeUnknown as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"outcome unknown ({exc}); retry with the same request_id")
        raise AssertionError("context.abort returned")

    def _issued_at(self, context: grpc.aio.ServicerContext) -> float:
        """The client's first-send time from the request metadata; 0 when absent.

        Raises Rejection for a value that is no time, or one further ahead of this
        node's clock than the dedupe window (its answer would be forgotten too early)."""
        raw = next((v for k, v in context.invocation_metadata() or () if k == ISSUED_AT_METADATA_KEY), None)
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
