"""The RPC face of the batcher: what it admits, and the status each outcome ends a call with."""
from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.commands import EmptyResult, Entry, Failure, Register, Result
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.replication.batcher import OutcomeUnknown
from coordinator.replication.leader_clock import LeaderClock
from coordinator.replication.replica import NotLeader, Overloaded
from coordinator.transport.proposer import Proposer
from coordinator.api.metadata import ISSUED_AT_METADATA_KEY, LEADER_METADATA_KEY, REASON_METADATA_KEY, reason_value
from coordinator.transport.status_map import REASON_TO_PB

WINDOW = 600.0


class Aborted(Exception):
    pass


class Context:
    """The part of grpc.aio.ServicerContext the proposer uses; abort raises, as gRPC's does."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.trailing: tuple[tuple[str, str], ...] = ()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)


class Addresses:
    def grpc_of(self, raft_address: str | None) -> str | None:
        return {"10.0.0.2:4321": "10.0.0.2:50051"}.get(raft_address or "")


class Replica:
    config = Addresses()
    leader: str | None = None  # the leader's Raft address when this node does not lead; None: it leads

    def is_leader(self) -> bool:
        return self.leader is None

    def leader_raft_address(self) -> str | None:
        return self.leader


class Batcher:
    """Answers every proposal with `outcome`: a result to return or an exception to raise."""

    def __init__(self, outcome: Result | Exception) -> None:
        self.replica = Replica()
        self.dedupe_window_s = WINDOW
        self.clock = LeaderClock()
        self.outcome = outcome
        self.proposed: list[Entry] = []
        self.barriers = 0

    async def propose(self, entry: Entry) -> Result:
        self.proposed.append(entry)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    async def barrier(self) -> None:
        self.barriers += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome


def register(request_id: str = "r-1") -> pb.RegisterRequest:
    return pb.RegisterRequest(secret=b"s" * 16, request_id=request_id, group="g", agent_id="a")


async def submit(batcher: Batcher, context: Context, request: Any = None) -> Result:
    return await Proposer(batcher).submit(context, request or register(), wire.register_from_pb)  # type: ignore[arg-type]


async def test_a_request_is_proposed_as_its_command_with_the_clients_issue_time() -> None:
    batcher = Batcher(EmptyResult())
    issued = time.time() - 5
    assert await submit(batcher, Context(((ISSUED_AT_METADATA_KEY, repr(issued)),))) == EmptyResult()
    assert batcher.proposed == [Entry("r-1", 0.0, Register("g", "a", (b"s" * 16).hex()), issued)]


@pytest.mark.parametrize("metadata, field", [
    ((), "request_id"),
    (((ISSUED_AT_METADATA_KEY, "yesterday"),), ISSUED_AT_METADATA_KEY),
    (((ISSUED_AT_METADATA_KEY, "nan"),), ISSUED_AT_METADATA_KEY),
    (((ISSUED_AT_METADATA_KEY, "-1"),), ISSUED_AT_METADATA_KEY),
    (((ISSUED_AT_METADATA_KEY, "FUTURE"),), ISSUED_AT_METADATA_KEY),
])
async def test_a_request_that_is_not_admitted_is_never_proposed(metadata, field: str) -> None:
    # Two windows ahead of the clock when the test runs, not when it was collected.
    metadata = tuple((k, str(time.time() + 2 * WINDOW) if v == "FUTURE" else v) for k, v in metadata)
    batcher, context = Batcher(EmptyResult()), Context(metadata)
    request = register("bad id" if field == "request_id" else "r-1")
    with pytest.raises(Aborted):
        await submit(batcher, context, request)
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT and context.details.startswith(f"{field}: ")
    assert batcher.proposed == []


@pytest.mark.parametrize("outcome, code, details", [
    (Rejection.invalid("group", "bad"), grpc.StatusCode.INVALID_ARGUMENT, "group: bad"),
    (Failure.of(Rejection.because(ReasonCode.STALE_INCARNATION, "stale incarnation", "token.incarnation")),
     grpc.StatusCode.FAILED_PRECONDITION, "token.incarnation: stale incarnation"),
    (Failure.of(Rejection.because(ReasonCode.GROUP_NOT_FOUND, "group 'g' does not exist")),
     grpc.StatusCode.NOT_FOUND, "group 'g' does not exist"),
    (Overloaded("the log is full"), grpc.StatusCode.RESOURCE_EXHAUSTED, "the log is full"),
    (OutcomeUnknown("no result in time"), grpc.StatusCode.UNAVAILABLE,
     "outcome unknown (no result in time); retry with the same request_id"),
    (NotLeader("10.0.0.2:4321"), grpc.StatusCode.UNAVAILABLE, "not the leader; leader is 10.0.0.2:50051"),
    (NotLeader(None), grpc.StatusCode.UNAVAILABLE, "not the leader; leader is unknown"),
])
async def test_each_outcome_ends_the_call_with_its_status(outcome, code: grpc.StatusCode, details: str) -> None:
    context = Context()
    with pytest.raises(Aborted):
        await submit(Batcher(outcome), context)
    assert (context.code, context.details) == (code, details)
    leader = "10.0.0.2:50051" in details
    refused = isinstance(outcome, (Rejection, Failure))
    expected = (((LEADER_METADATA_KEY, "10.0.0.2:50051"),) if leader else
                ((REASON_METADATA_KEY, reason_value(REASON_TO_PB[outcome.reason_code])),) if refused else ())
    assert context.trailing == expected


async def test_a_read_barrier_without_a_leader_redirects_the_caller() -> None:
    context, batcher = Context(), Batcher(NotLeader("10.0.0.2:4321"))
    with pytest.raises(Aborted):
        await Proposer(batcher).barrier(context)  # type: ignore[arg-type]
    assert batcher.barriers == 1 and context.code is grpc.StatusCode.UNAVAILABLE
    assert context.trailing == ((LEADER_METADATA_KEY, "10.0.0.2:50051"),)
    ok = Batcher(EmptyResult())
    await Proposer(ok).barrier(Context())  # type: ignore[arg-type]
    assert ok.barriers == 1


async def test_a_node_that_does_not_lead_refuses_before_batching_or_reading() -> None:
    """It must not batch, encode and hand Raft a proposal only to be told it does not
    lead, nor wait behind its last term's batches: admission lets its calls through
    (it sheds nothing), so this is where they end."""
    batcher = Batcher(EmptyResult())
    batcher.replica.leader = "10.0.0.2:4321"
    for call in (lambda ctx: submit(batcher, ctx), lambda ctx: Proposer(batcher).barrier(ctx)):  # type: ignore[arg-type]
        context = Context()
        with pytest.raises(Aborted):
            await call(context)
        assert (context.code, context.trailing) == (grpc.StatusCode.UNAVAILABLE, ((LEADER_METADATA_KEY, "10.0.0.2:50051"),))
    assert batcher.proposed == [] and batcher.barriers == 0
    # Bad input is refused as bad input even here: the node's role does not change the answer.
    context = Context()
    with pytest.raises(Aborted):
        await submit(batcher, context, register("bad id"))
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT
