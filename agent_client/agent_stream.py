"""The agent's session: one AgentService.Session stream carries its writes, its
keepalives and the orders the coordinator pushes (blocking and asyncio twins).

Each operation is the unary call's request in a frame with a correlation number;
the answer carries that number and the unary call's response or status, judged the
same way as a unary call's (`judge`): UNAVAILABLE and DEADLINE_EXCEEDED are retried
under the call's deadline, and so is a frame an overloaded node shed (after its hint);
anything else is a final Rejected with its reason code.
The stream is re-opened whenever it ends (on the leader a follower or the old leader
names, else on the next node), and every unanswered frame is sent again, unchanged:
the same request id and the same first-send time, so the coordinator applies each
write once. A frame unanswered for `rpc_timeout` means a stuck stream: it is torn
down and re-opened on the next node. The watch (one per session) is re-sent on
every new stream too, and the coordinator then pushes each unacknowledged order again
(agents treat order ids idempotently).

A stream that cannot be opened is judged as a unary call's connection is
(Connection.check): once every endpoint has shown something no retry changes, the
unanswered frames end with TLSHandshakeFailed at once.

The unary path (connection.py) stays for tools and as `transport="unary"`.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import random
import threading
import time
from typing import Any, Callable

import grpc

from agent_client.connection import (BACKOFF, RETRYABLE, AsyncConnection, Connection, CoordinatorUnavailable,
                                     Rejected, TLSHandshakeFailed, _trailer, overload_hint, spread_hint)
from coordinator import tracing
from coordinator.api.metadata import REASON_METADATA_KEY, parse_reason
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger("agent_client")
SESSION = "AgentService.Session"
# The AgentService calls a session carries, and the frame field of each.
FIELDS = {"Register": "register", "Heartbeat": "heartbeat", "CommitCheckpoint": "commit_checkpoint",
          "ReportDependencies": "report_dependencies", "AckOrder": "ack_order", "Deregister": "deregister"}
TRANSPORTS = ("session", "unary")
FLOOR_EVERY_S = 30.0  # at most this long between a session's keepalives


def keepalive_every(transport: str, lease_ttl_s: float) -> float:
    """Seconds between an agent's keepalives by default.

    Unary: a third of the lease, which the keepalives alone keep. A session holds its
    agent's lease for as long as it is open (the coordinator proves the connection alive
    with HTTP/2 pings, which the client's gRPC answers by itself), so there a keepalive
    only learns the rollback floor (how much of the delivery log may go) and the group's
    state: once a lease, at most FLOOR_EVERY_S. Every keepalive is a message the
    leader's Python reads and answers; at 5,000 agents these were most of its work."""
    if transport == "session":
        return min(FLOOR_EVERY_S, max(0.1, lease_ttl_s))
    return min(5.0, max(0.1, lease_ttl_s / 3))
_CODES = {c.value[0]: c for c in grpc.StatusCode}
# How a session call itself can end for good: the coordinator refused the stream (bad
# bytes, no such method on an old coordinator, not allowed). Any other end of the
# stream is re-opened, and its unanswered frames re-sent under their own deadlines.
FINAL_ENDS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED,
              grpc.StatusCode.UNAUTHENTICATED)
OnOrder = Callable[[pb.Order], None]
OnWatchEnded = Callable[[grpc.StatusCode, str], None]


class Retry(Exception):
    """A retryable status: re-send the frame (on `leader` if one was named), not before
    `after` seconds when an overloaded node shed it."""

    def __init__(self, leader: str | None, text: str, after: float = 0.0) -> None:
        super().__init__(text)
        self.leader, self.after = leader, after


def carries(service: str, method: str) -> bool:
    """Whether a session carries this call (the rest stay unary)."""
    return service == "AgentService" and method in FIELDS


def frame(correlation: int, field: str, request: Any, issued_at: str = "") -> pb.AgentFrame:
    return pb.AgentFrame(correlation=correlation, issued_at=issued_at, trace_context=tracing.context_to_send(),
                         **{field: request})


def status_code(status: pb.FrameStatus) -> grpc.StatusCode:
    return _CODES.get(status.code, grpc.StatusCode.UNKNOWN)


def judge(reply: pb.CoordinatorFrame, field: str) -> Any:
    """The response a reply carries; raises Rejected (final) or Retry, as the unary
    Connection decides on the same status."""
    if reply.WhichOneof("body") == "status":
        code = status_code(reply.status)
        if code in RETRYABLE:
            raise Retry(reply.status.leader or None, reply.status.message)
        refused = Rejected(code, reply.status.message, reply.status.reason)
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED and refused.reason_code == pb.REASON_OVERLOADED:
            raise Retry(None, reply.status.message, spread_hint(reply.status.retry_after_s))
        raise refused
    return getattr(reply, field)


def ended(err: grpc.RpcError) -> pb.FrameStatus:
    """A session call's own non-retryable end, as the status each unanswered frame gets."""
    return pb.FrameStatus(code=err.code().value[0], message=err.details() or "",
                          reason=parse_reason(_trailer(err, REASON_METADATA_KEY)))


class _Frames:
    """What both twins share: correlation numbers, unanswered frames, the watch, and
    what a reply means for them."""

    conn: Connection | AsyncConnection

    def __init__(self, on_order: OnOrder, on_watch_ended: OnWatchEnded) -> None:
        self._numbers = itertools.count(1)
        self._unanswered: dict[int, Any] = {}  # correlation -> waiter (with .frame)
        self._watch: pb.AgentFrame | None = None
        self._on_order, self._on_watch_ended = on_order, on_watch_ended
        self._rotate = False  # the current stream is torn down as stuck: try the next node

    def _stream_ended(self, err: grpc.RpcError | None) -> pb.FrameStatus | None:
        """After a stream ended (`err` None: our own cancel), pick the node to try next;
        returns the status every unanswered frame ends with when the coordinator refused
        the session itself (not retryable), else None."""
        rotate, self._rotate = self._rotate, False
        if err is None or err.code() == grpc.StatusCode.CANCELLED:
            if rotate:
                self.conn.follow(None)
            return None
        if err.code() in RETRYABLE:
            self.conn.redirect(err)
            return None
        if err.code() not in FINAL_ENDS:  # e.g. INTERNAL from the transport: open it again
            log.info("session ended, re-opening: %s %s", err.code().name, err.details())
            return None
        log.warning("session refused: %s %s", err.code().name, err.details())
        return ended(err)

    @staticmethod
    def _remaining(method: str, budget: float, end: float) -> float:
        """Seconds left of a call's deadline; CoordinatorUnavailable once none are."""
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise CoordinatorUnavailable(f"AgentService.{method}: no leader answered within {budget}s")
        return remaining

    @staticmethod
    def _reopen_pause(backoff: float, broke: grpc.RpcError | None) -> float:
        """How long to wait before opening the stream again: the jittered backoff, or the
        node's retry hint when it shed the open (after a leader change every agent
        re-opens at once, and a new leader that sheds must not be asked again at once)."""
        return max(random.uniform(0, backoff), spread_hint(overload_hint(broke)) if broke is not None else 0.0)

    @staticmethod
    def _pause(r: Retry, backoff: float, end: float) -> float:
        """How long to wait before re-sending a frame: the jittered backoff, or the
        overloaded node's hint when longer, never past the call's deadline (the next
        turn of the loop then ends the call)."""
        return max(0.0, min(max(random.uniform(0, backoff), r.after), end - time.monotonic()))

    def _follow(self, r: Retry) -> None:
        """A frame refused as retryable named another leader: re-open the stream there."""
        if r.leader and r.leader != self.conn.target:
            self.conn.follow(r.leader)
            self._reconnect(rotate=False)

    def _reconnect(self, *, rotate: bool) -> None:
        raise NotImplementedError

    def _resend(self) -> list[pb.AgentFrame]:
        """What a new stream starts with: the watch, then every unanswered frame."""
        return ([self._watch] if self._watch is not None else []) + [w.frame for w in self._unanswered.values()]

    def _route(self, reply: pb.CoordinatorFrame) -> Any | None:
        """The waiter a reply answers (None: a push or a reply nobody waits for any more);
        pushes go to on_order, the watch's end to on_watch_ended. Returns "rewatch"
        when the watch should be sent again after a pause."""
        watch = self._watch
        if watch is not None and reply.correlation == watch.correlation:
            kind = reply.WhichOneof("body")
            if kind == "order":
                self._on_order(reply.order)
            elif kind == "status":
                code = status_code(reply.status)
                if code in RETRYABLE:
                    return "rewatch"
                self._watch = None
                self._on_watch_ended(code, reply.status.message)
            return None
        return self._unanswered.get(reply.correlation)


class _Waiter:
    def __init__(self, f: pb.AgentFrame) -> None:
        self.frame = f
        self.reply: pb.CoordinatorFrame | None = None
        self.error: TLSHandshakeFailed | None = None  # no endpoint can be used: the call ends with it
        self.event = threading.Event()


class SessionStream(_Frames):
    """The blocking session, over a Connection's channels and leader tracking; thread-safe.
    A daemon thread keeps the stream open and reads it."""

    def __init__(self, conn: Connection, on_order: OnOrder, on_watch_ended: OnWatchEnded) -> None:
        super().__init__(on_order, on_watch_ended)
        self.conn = conn
        self._lock = threading.Lock()
        self._out: queue.SimpleQueue[pb.AgentFrame | None] | None = None
        self._call: Any = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._pump, name="raftpoint-session", daemon=True)
                self._thread.start()

    def _send(self, f: pb.AgentFrame) -> None:
        """Under the lock: onto the current stream, if one is open (else the next one sends it)."""
        if self._out is not None:
            self._out.put(f)

    def call(self, method: str, request: Any, *, deadline: float | None = None) -> Any:
        field = FIELDS[method]
        budget = self.conn.deadline if deadline is None else deadline
        end = time.monotonic() + budget
        waiter = _Waiter(frame(next(self._numbers), field, request, repr(time.time())))
        corr = waiter.frame.correlation
        pause = BACKOFF["multiplier"]
        self._start()
        with self._lock:
            self._unanswered[corr] = waiter
            self._send(waiter.frame)
        try:
            while True:
                remaining = self._remaining(method, budget, end)
                if not waiter.event.wait(min(self.conn.rpc_timeout, remaining)):
                    self._reconnect(rotate=True)  # a stuck stream: unanswered frames go again on the next one
                    continue
                if waiter.error is not None:
                    raise waiter.error
                try:
                    return judge(waiter.reply, field)  # type: ignore[arg-type]
                except Retry as r:
                    self._follow(r)
                    self._closed.wait(self._pause(r, pause, end))
                    pause = min(pause * 2, BACKOFF["max"])
                    with self._lock:
                        waiter.event.clear()
                        self._send(waiter.frame)
        finally:
            with self._lock:
                self._unanswered.pop(corr, None)

    def watch(self, request: pb.WatchOrdersRequest) -> None:
        """Have this agent's orders pushed to on_order (replacing an earlier watch)."""
        self._start()
        with self._lock:
            self._watch = frame(next(self._numbers), "watch_orders", request)
            self._send(self._watch)

    def _rewatch(self, watch: pb.AgentFrame) -> None:
        with self._lock:
            if self._watch is watch:
                self._send(watch)

    def _reconnect(self, *, rotate: bool) -> None:
        with self._lock:
            if self._call is not None:
                self._rotate = self._rotate or rotate
                self._call.cancel()

    def _pump(self) -> None:
        pause = BACKOFF["multiplier"]
        while not self._closed.is_set():
            broke: grpc.RpcError | None = None
            out: queue.SimpleQueue[pb.AgentFrame | None] = queue.SimpleQueue()
            with self._lock:
                self._out = out
                for f in self._resend():
                    out.put(f)
                target = self.conn.target
            call = None
            try:
                call = self.conn._stub("AgentService", target).Session(iter(out.get, None), metadata=self.conn.credentials)
                with self._lock:
                    self._call = call
                if self._closed.is_set():
                    call.cancel()
                for reply in call:
                    pause = BACKOFF["multiplier"]
                    self._dispatch(reply)
            except grpc.RpcError as err:
                broke = err
                self._unusable(err, target)
                self._broken(err)
            finally:
                out.put(None)
                with self._lock:
                    self._out = self._call = None
                if call is not None:
                    call.cancel()
            self._closed.wait(self._reopen_pause(pause, broke))
            pause = min(pause * 2, BACKOFF["max"])

    def _dispatch(self, reply: pb.CoordinatorFrame) -> None:
        with self._lock:
            watch = self._watch
            waiter = self._route(reply)
        if waiter == "rewatch":
            timer = threading.Timer(random.uniform(0, BACKOFF["max"]), self._rewatch, (watch,))
            timer.daemon = True
            timer.start()
        elif waiter is not None:
            waiter.reply = reply
            waiter.event.set()

    def _unusable(self, err: grpc.RpcError, target: str) -> None:
        """The unanswered frames end with TLSHandshakeFailed once no endpoint can be used."""
        if err.code() not in RETRYABLE:
            return
        try:
            self.conn.check(target, err, SESSION)
        except TLSHandshakeFailed as exc:
            with self._lock:
                waiters = list(self._unanswered.values())
            for w in waiters:
                w.error = exc
                w.event.set()

    def _broken(self, err: grpc.RpcError) -> None:
        """The stream ended: follow the leader, or fail the unanswered frames for good."""
        with self._lock:
            status = self._stream_ended(err)
            waiters = list(self._unanswered.values()) if status is not None else []
        for w in waiters:
            w.reply = pb.CoordinatorFrame(correlation=w.frame.correlation, status=status)
            w.event.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._out is not None:
                self._out.put(None)
            if self._call is not None:
                self._call.cancel()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)


class AsyncSessionStream(_Frames):
    """The asyncio session, over an AsyncConnection; use from one event loop. A task
    keeps the stream open and reads it."""

    conn: AsyncConnection

    def __init__(self, conn: AsyncConnection, on_order: OnOrder, on_watch_ended: OnWatchEnded) -> None:
        super().__init__(on_order, on_watch_ended)
        self.conn = conn
        self._out: asyncio.Queue[pb.AgentFrame | None] | None = None
        self._call: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def _start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._pump(), name="raftpoint-session")

    def _send(self, f: pb.AgentFrame) -> None:
        if self._out is not None:
            self._out.put_nowait(f)

    async def call(self, method: str, request: Any, *, deadline: float | None = None) -> Any:
        field = FIELDS[method]
        budget = self.conn.deadline if deadline is None else deadline
        end = time.monotonic() + budget
        loop = asyncio.get_running_loop()
        waiter = _AsyncWaiter(frame(next(self._numbers), field, request, repr(time.time())), loop)
        corr = waiter.frame.correlation
        pause = BACKOFF["multiplier"]
        self._start()
        self._unanswered[corr] = waiter
        self._send(waiter.frame)
        try:
            while True:
                remaining = self._remaining(method, budget, end)
                try:
                    reply = await asyncio.wait_for(asyncio.shield(waiter.future),
                                                   min(self.conn.rpc_timeout, remaining))
                except TimeoutError:
                    self._reconnect(rotate=True)
                    continue
                try:
                    return judge(reply, field)
                except Retry as r:
                    self._follow(r)
                    await asyncio.sleep(self._pause(r, pause, end))
                    pause = min(pause * 2, BACKOFF["max"])
                    waiter.future = loop.create_future()
                    self._send(waiter.frame)
        finally:
            self._unanswered.pop(corr, None)

    def watch(self, request: pb.WatchOrdersRequest) -> None:
        self._start()
        self._watch = frame(next(self._numbers), "watch_orders", request)
        self._send(self._watch)

    def _reconnect(self, *, rotate: bool) -> None:
        if self._call is not None:
            self._rotate = self._rotate or rotate
            self._call.cancel()

    async def _pump(self) -> None:
        pause = BACKOFF["multiplier"]
        while not self._closed:
            broke: grpc.RpcError | None = None
            out: asyncio.Queue[pb.AgentFrame | None] = asyncio.Queue()
            self._out = out
            for f in self._resend():
                out.put_nowait(f)

            async def frames(q: asyncio.Queue[pb.AgentFrame | None] = out) -> Any:
                while (f := await q.get()) is not None:
                    yield f
            target = self.conn.target
            call = self._call = self.conn._stub("AgentService", target).Session(frames(), metadata=self.conn.credentials)
            try:
                async for reply in call:
                    pause = BACKOFF["multiplier"]
                    self._dispatch(reply)
            except grpc.RpcError as err:
                broke = err
                await self._unusable(err, target)
                self._broken(err)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed or (task is not None and task.cancelling()):
                    raise
                self._broken(None)  # grpc.aio reports our own call.cancel() so
            finally:
                out.put_nowait(None)
                self._out = self._call = None
                call.cancel()
            await asyncio.sleep(self._reopen_pause(pause, broke))
            pause = min(pause * 2, BACKOFF["max"])

    def _dispatch(self, reply: pb.CoordinatorFrame) -> None:
        watch = self._watch
        waiter = self._route(reply)
        if waiter == "rewatch":
            def rewatch() -> None:  # unless the watch was replaced or ended meanwhile
                if watch is not None and self._watch is watch:
                    self._send(watch)
            asyncio.get_running_loop().call_later(random.uniform(0, BACKOFF["max"]), rewatch)
        elif waiter is not None and not waiter.future.done():
            waiter.future.set_result(reply)

    async def _unusable(self, err: grpc.RpcError, target: str) -> None:
        """The unanswered frames end with TLSHandshakeFailed once no endpoint can be used."""
        if err.code() not in RETRYABLE:
            return
        try:
            await self.conn.check(target, err, SESSION)
        except TLSHandshakeFailed as exc:
            for w in self._unanswered.values():
                if not w.future.done():
                    w.future.set_exception(exc)

    def _broken(self, err: grpc.RpcError | None) -> None:
        status = self._stream_ended(err)
        for w in list(self._unanswered.values()) if status is not None else ():
            if not w.future.done():
                w.future.set_result(pb.CoordinatorFrame(correlation=w.frame.correlation, status=status))

    async def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _AsyncWaiter:
    def __init__(self, f: pb.AgentFrame, loop: asyncio.AbstractEventLoop) -> None:
        self.frame = f
        self.future: asyncio.Future[pb.CoordinatorFrame] = loop.create_future()
