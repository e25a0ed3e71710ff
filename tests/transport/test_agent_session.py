"""The agent session stream: the same operations as the unary RPCs, answered by
correlation number, with orders pushed as they are applied."""
from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from types import SimpleNamespace
from typing import Any, AsyncIterator, Iterator

import grpc
import pytest

from agent_client.connection import Connection, overload_hint
from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import ISSUED_AT_METADATA_KEY, LEADER_METADATA_KEY, REASON_METADATA_KEY, parse_reason
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import wait_for
from coordinator.service.leases import LeaseTable
from coordinator.transport.agent_session import OUTBOX_LIMIT, AgentSession
from coordinator.transport.servicers import AgentServicer
from tests.support.cluster import past_overload
from tests.transport.test_refusal_status import coordinator_fixture  # noqa: F401  (group "g", agent "a" at incarnation 2)

SECRET = b"s" * 16  # the agent secret Register takes and every agent write repeats

STALE = pb.FencingToken(secret=SECRET, incarnation=1)


class RawSession:
    """A Session call driven frame by frame; replies (and the call's end) are queued.

    Like the client, it takes an overloaded node's refusal as "later", not as the answer:
    a shed frame is sent again after the hint, and a shed open (which served no frame) is
    opened again with every unanswered frame. A loaded machine can make the node shed
    any call; what these tests ask about is the answer after that."""

    def __init__(self, coordinator: InProcessCoordinator, deadline: float = 20.0) -> None:
        self._coordinator = coordinator
        self._end = time.monotonic() + deadline
        self.unanswered: dict[int, pb.AgentFrame] = {}
        self._open()

    def _open(self) -> None:
        self.channel = self._coordinator.client_tls().channel(self._coordinator.address)
        self.out: queue.SimpleQueue[pb.AgentFrame | None] = queue.SimpleQueue()
        self.call = pb_grpc.AgentServiceStub(self.channel).Session(iter(self.out.get, None), timeout=30)
        self.replies: queue.SimpleQueue[pb.CoordinatorFrame | None] = queue.SimpleQueue()
        self.error: grpc.RpcError | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for reply in self.call:
                self.replies.put(reply)
        except grpc.RpcError as err:
            self.error = err
        self.replies.put(None)

    def send(self, correlation: int, issued_at: str | None = None, **body: Any) -> None:
        frame = pb.AgentFrame(correlation=correlation, issued_at=repr(time.time()) if issued_at is None
                              else issued_at, **body)
        self.unanswered[correlation] = frame
        self.out.put(frame)

    def next(self, timeout: float = 5.0) -> pb.CoordinatorFrame | None:
        while True:
            reply = self.replies.get(timeout=timeout)
            if reply is None:
                hint = overload_hint(self.error) if self.error is not None else None
                if hint is None or time.monotonic() + hint >= self._end:
                    return None
                self.close()
                time.sleep(hint)
                self._open()
                for frame in self.unanswered.values():
                    self.out.put(frame)
                continue
            if (reply.WhichOneof("body") == "status" and reply.status.reason == pb.REASON_OVERLOADED
                    and reply.correlation in self.unanswered
                    and time.monotonic() + reply.status.retry_after_s < self._end):
                time.sleep(reply.status.retry_after_s)
                self.out.put(self.unanswered[reply.correlation])
                continue
            self.unanswered.pop(reply.correlation, None)
            return reply

    def ask(self, correlation: int, **body: Any) -> pb.CoordinatorFrame:
        self.send(correlation, **body)
        reply = self.next()
        assert reply is not None and reply.correlation == correlation, (reply, self.error)
        return reply

    def close(self) -> None:
        self.out.put(None)
        self._reader.join(5)
        self.call.cancel()
        self.channel.close()


def unary_refusal(channel: grpc.Channel, method: str, request: Any, issued_at: str) -> grpc.RpcError:
    """The unary call's refusal, past any overloaded node's shedding (as the client does)."""
    with pytest.raises(grpc.RpcError) as info:
        past_overload(lambda: getattr(pb_grpc.AgentServiceStub(channel), method)(
            request, timeout=5, metadata=((ISSUED_AT_METADATA_KEY, issued_at),)))
    return info.value


def _checkpoint(index: int, token: pb.FencingToken, rid: str, agent: str = "a") -> pb.CommitCheckpointRequest:
    return pb.CommitCheckpointRequest(request_id=rid, token=token, checkpoint=pb.CheckpointMeta(
        group="g", agent_id=agent, index=index, kind=pb.BASIC, blob_uri=f"file:///{agent}/{index}", sha256="0" * 64))


# (operation, frame field, the request with a request id to fill in, the refusal expected)
REFUSALS = [
    ("Register", "register", lambda rid: pb.RegisterRequest(secret=SECRET, request_id=rid, group="no such group!", agent_id="a"),
     pb.REASON_INVALID_FIELD),
    ("Register", "register", lambda rid: pb.RegisterRequest(secret=SECRET, request_id=rid, group="missing", agent_id="a"),
     pb.REASON_GROUP_NOT_FOUND),
    ("Register", "register", lambda rid: pb.RegisterRequest(secret=SECRET, request_id="", group="g", agent_id="a"),
     pb.REASON_INVALID_FIELD),
    ("Heartbeat", "heartbeat", lambda rid: pb.HeartbeatRequest(group="g", agent_id="a", token=STALE),
     pb.REASON_STALE_INCARNATION),
    ("Heartbeat", "heartbeat", lambda rid: pb.HeartbeatRequest(group="g", agent_id="nobody", token=STALE),
     pb.REASON_AGENT_NOT_FOUND),
    ("CommitCheckpoint", "commit_checkpoint", lambda rid: _checkpoint(1, STALE, rid), pb.REASON_STALE_INCARNATION),
    ("CommitCheckpoint", "commit_checkpoint", lambda rid: _checkpoint(0, pb.FencingToken(secret=SECRET, incarnation=2), rid),
     pb.REASON_INVALID_FIELD),
    ("ReportDependencies", "report_dependencies", lambda rid: pb.ReportDependenciesRequest(
        request_id=rid, group="g", agent_id="a", token=STALE, records=[pb.DependencyRecord(
            sender="b", send_interval=1, receiver="a", receive_interval=1, message_id="m")]),
     pb.REASON_STALE_INCARNATION),
    ("AckOrder", "ack_order", lambda rid: pb.AckOrderRequest(request_id=rid, group="g", agent_id="a", token=STALE,
                                                             order_id=99), pb.REASON_STALE_INCARNATION),
    ("Deregister", "deregister", lambda rid: pb.DeregisterRequest(request_id=rid, group="g", agent_id="a",
                                                                  token=STALE), pb.REASON_STALE_INCARNATION),
]


@pytest.mark.parametrize("method, field, request_of, reason", REFUSALS,
                         ids=[f"{m}-{pb.ReasonCode.Name(r)}" for m, _, _, r in REFUSALS])
def test_a_refusal_on_the_session_says_what_the_unary_call_says(coordinator, method, field, request_of,
                                                                reason) -> None:
    with coordinator.client_tls().channel(coordinator.address) as channel:
        unary = unary_refusal(channel, method, request_of(f"u-{method}-{reason}"), repr(time.time()))
    session = RawSession(coordinator)
    try:
        reply = session.ask(7, **{field: request_of(f"s-{method}-{reason}")})
    finally:
        session.close()
    assert reply.WhichOneof("body") == "status"
    trailers = dict(unary.trailing_metadata() or ())
    assert parse_reason(trailers.get(REASON_METADATA_KEY)) == reason
    assert (reply.status.code, reply.status.reason, reply.status.message) == (
        unary.code().value[0], reason, unary.details())


def test_a_bad_first_send_time_is_refused_on_both_paths_the_same(coordinator) -> None:
    request = pb.RegisterRequest(secret=SECRET, request_id="t-1", group="g", agent_id="b")
    with coordinator.client_tls().channel(coordinator.address) as channel:
        unary = unary_refusal(channel, "Register", request, "yesterday")
    session = RawSession(coordinator)
    try:
        session.send(1, issued_at="yesterday", register=request)
        reply = session.next()
    finally:
        session.close()
    assert reply is not None and reply.status.message == unary.details()
    assert reply.status.reason == pb.REASON_INVALID_FIELD and ISSUED_AT_METADATA_KEY in reply.status.message


def test_pipelined_commits_are_each_answered_under_their_correlation(coordinator) -> None:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        reg = conn.call("AgentService", "Register", pb.RegisterRequest(secret=SECRET, request_id="p-reg", group="g", agent_id="p"))
    token = pb.FencingToken(secret=SECRET, incarnation=reg.incarnation)
    session = RawSession(coordinator)
    try:
        for i in range(1, 21):  # all sent before any answer is read
            session.send(100 + i, commit_checkpoint=_checkpoint(i, token, f"p-cp-{i}", agent="p"))
        replies = [session.next() for _ in range(20)]
        # A re-sent frame (same request id) is answered from the dedupe table, not applied twice.
        again = session.ask(500, commit_checkpoint=_checkpoint(3, token, "p-cp-3", agent="p"))
    finally:
        session.close()
    assert sorted(r.correlation for r in replies) == [100 + i for i in range(1, 21)]
    answered = {r.correlation - 100: r for r in replies}
    assert all(r.WhichOneof("body") in ("commit_checkpoint", "status") for r in replies)
    # Concurrent commits of growing indexes may overtake each other; each answer names its own checkpoint.
    for i, r in answered.items():
        if r.WhichOneof("body") == "commit_checkpoint":
            assert r.commit_checkpoint.checkpoint.index == i
        else:
            assert r.status.reason == pb.REASON_INDEX_NOT_ABOVE_LAST
    assert again.WhichOneof("body") == answered[3].WhichOneof("body")


def test_orders_are_pushed_to_the_live_incarnation_and_a_replaced_one_is_fenced(coordinator) -> None:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        first = conn.call("AgentService", "Register", pb.RegisterRequest(secret=SECRET, request_id="o-r1", group="g", agent_id="o"))
        session = RawSession(coordinator)
        try:
            session.send(1, watch_orders=pb.WatchOrdersRequest(
                group="g", agent_id="o", token=pb.FencingToken(secret=SECRET, incarnation=first.incarnation)))
            hb = session.ask(2, heartbeat=pb.HeartbeatRequest(group="g", agent_id="o", token=pb.FencingToken(secret=SECRET, 
                incarnation=first.incarnation)))
            assert hb.WhichOneof("body") == "heartbeat"
            # A new incarnation registers: the old one's watch ends fenced, with no order for it.
            again = conn.call("AgentService", "Register", pb.RegisterRequest(secret=SECRET, request_id="o-r2", group="g",
                                                                            agent_id="o"))
            ended = session.next()
            assert ended is not None and ended.correlation == 1 and ended.WhichOneof("body") == "status"
            assert ended.status.reason == pb.REASON_STALE_INCARNATION
            # The same session watches for the new incarnation and gets its rollback order pushed.
            session.send(3, watch_orders=pb.WatchOrdersRequest(
                group="g", agent_id="o", token=pb.FencingToken(secret=SECRET, incarnation=again.incarnation)))
            pushed = session.next()
            assert pushed is not None and pushed.correlation == 3 and pushed.WhichOneof("body") == "order"
            assert pushed.order.roll_back.recovery_id == again.recovery_id
            ack = session.ask(4, ack_order=pb.AckOrderRequest(
                request_id="o-ack", group="g", agent_id="o", token=pb.FencingToken(secret=SECRET, incarnation=again.incarnation),
                order_id=pushed.order.order_id))
            assert ack.WhichOneof("body") == "ack_order"
        finally:
            session.close()
    assert session.error is None  # half-closed by the client: the call ends OK


def test_a_session_ends_unavailable_naming_the_leader_when_the_node_stops_leading() -> None:
    with InProcessCoordinator() as coordinator:
        session = RawSession(coordinator)
        try:
            session.send(1, heartbeat=pb.HeartbeatRequest(group="g", agent_id="a", token=STALE))
            assert session.next() is not None  # open and answering (a refusal: no such group)
            coordinator.replica.is_leader = lambda: False  # type: ignore[method-assign]
            wait_for(lambda: session.error is not None, "the session to end", 5)
        finally:
            session.close()
            del coordinator.replica.is_leader
    err = session.error
    assert err is not None and err.code() == grpc.StatusCode.UNAVAILABLE
    assert "stopped leading" in (err.details() or "")
    assert dict(err.trailing_metadata() or ()).get(LEADER_METADATA_KEY) == coordinator.address


def test_an_undecodable_frame_ends_the_session_as_invalid(coordinator) -> None:
    with coordinator.client_tls().channel(coordinator.address) as channel:
        call = channel.stream_stream("/raftpoint.v1.AgentService/Session")(iter([b"\xff\xff\xff"]), timeout=5)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not decode" in (info.value.details() or "")


class KeepaliveOps(SimpleNamespace):
    """What a session of keepalives uses of AgentOps: every keepalive is answered."""
    p = SimpleNamespace(require_leader=lambda: None)

    def __init__(self) -> None:
        super().__init__(**dict.fromkeys(("register", "commit_checkpoint", "report_dependencies", "ack_order",
                                          "deregister")))
        self.leases = LeaseTable()

    def keepalive_now(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(current_epoch=1)


class SteadyLeader:
    """Wake-ups of a node that never stops leading."""
    @contextlib.contextmanager
    def leadership_watch(self, on_lost: Any) -> Iterator[None]:
        yield


def keepalive(correlation: int, agent: str = "a", incarnation: int = 0) -> pb.AgentFrame:
    return pb.AgentFrame(correlation=correlation, heartbeat=pb.HeartbeatRequest(
        group="g", agent_id=agent, token=pb.FencingToken(incarnation=incarnation)))


async def test_a_session_holds_its_agents_lease_until_it_ends_even_when_left_suspended() -> None:
    """gRPC may leave a cancelled call's generator suspended at a yield, closed only when
    collected: the servicer ends the session when the call terminates, and from then on
    it holds no lease, whatever a straggling frame proves."""
    ops = KeepaliveOps()
    session = AgentSession(ops, SteadyLeader())  # type: ignore[arg-type]

    async def frames() -> AsyncIterator[pb.AgentFrame]:
        yield keepalive(1, "a", 3)
        yield keepalive(2, "b", 5)  # the session now speaks for b: a's lease is released
        await asyncio.Event().wait()  # the client sends nothing more

    answers = session.frames(frames())
    assert (await answers.__anext__()).correlation == 1
    assert (await answers.__anext__()).correlation == 2
    assert {key: set(held) for key, held in ops.leases.holds.items()} == {("g", "b"): {5}}
    session.end()  # the call terminated; the generator is still suspended at its yield
    assert ops.leases.holds == {}
    session._keepalive(keepalive(3, "c", 1))  # a frame answered after the end holds nothing
    assert ops.leases.holds == {}
    await answers.aclose()
    assert ops.leases.holds == {}


async def test_the_servicer_ends_its_session_when_grpc_says_the_call_terminated() -> None:
    """The wiring the test above relies on: the Session servicer registers the session's
    end with gRPC, so a cancelled call releases its hold without waiting for its
    generator to be collected."""
    servicer = AgentServicer.__new__(AgentServicer)  # the servicer's Session, over stand-in operations
    servicer.ops, servicer.wakeups, servicer.admission = KeepaliveOps(), SteadyLeader(), None
    terminated: list[Any] = []
    context = SimpleNamespace(add_done_callback=terminated.append)

    async def frames() -> AsyncIterator[pb.AgentFrame]:
        yield keepalive(1, "a", 2)
        await asyncio.Event().wait()

    call = servicer.Session(frames(), context)
    assert (await call.__anext__()).correlation == 1
    assert set(servicer.ops.leases.holds) == {("g", "a")}
    for done in terminated:  # gRPC: the call is over; its generator is still suspended at its yield
        done(context)
    assert servicer.ops.leases.holds == {}
    await call.aclose()


async def test_a_client_that_does_not_read_its_answers_is_not_read_either() -> None:
    """Answers wait in the session's outbox until sent; a client that keeps sending
    frames but never reads would make the node buffer them without bound. At
    OUTBOX_LIMIT waiting answers the session stops reading frames, and every frame is
    still answered once the client reads."""
    sent = 4 * OUTBOX_LIMIT
    read = [0]

    async def frames() -> AsyncIterator[pb.AgentFrame]:
        for correlation in range(1, sent + 1):
            read[0] += 1
            yield keepalive(correlation)

    ops = KeepaliveOps()
    session = AgentSession(ops, SteadyLeader())  # type: ignore[arg-type]
    answers = session.frames(frames())
    first = await answers.__anext__()  # the session reads; from here on the client reads nothing
    deadline = asyncio.get_running_loop().time() + 10
    while session.outbox.qsize() < OUTBOX_LIMIT:
        assert asyncio.get_running_loop().time() < deadline, (session.outbox.qsize(), read[0])
        await asyncio.sleep(0.01)
    for _ in range(100):  # the reader has every chance to read on
        await asyncio.sleep(0)
    assert session.outbox.qsize() == OUTBOX_LIMIT
    assert read[0] <= OUTBOX_LIMIT + 2, read[0]  # the one taken, the one waiting for room
    assert {key: set(held) for key, held in ops.leases.holds.items()} == {("g", "a"): {0}}  # the keepalives' agent
    rest = [answer async for answer in answers]
    assert ops.leases.holds == {}  # released when the session ended
    assert sorted([first.correlation, *(a.correlation for a in rest)]) == list(range(1, sent + 1))
    assert all(a.WhichOneof("body") == "heartbeat" for a in [first, *rest])
