"""One agent's session stream on the leader: frames in, answers and pushed orders out.

Each AgentFrame is handed to the same AgentOps method its unary RPC calls, in a task
of its own, so a session's writes are proposed concurrently (several commits share a
Raft batch) while each answer carries its frame's correlation number. A keepalive,
which only reads and never waits, is answered by the reader itself. Each frame is
admitted as its unary call would be: an overloaded node answers it with the shedding
status and its retry hint instead of doing the work. A watch frame
subscribes the session to the agent's orders through the applier's wake-ups
(order_wakeups.py): nothing polls. Once a frame has proved which live incarnation the
session speaks for (register, keepalive or watch), the session holds that agent's
lease (Leases.hold): the lease does not run out while the session is open, since the
session's connection is proved alive by HTTP/2 pings (server.ServerLimits.ping_s),
as long as the agent's keepalives keep proving it within a few TTLs
(core.decisions.HOLD_PROOF_TTLS), and runs a whole TTL from when the session ends, or
from a refused keepalive or watch, or the agent's deregistration. The session ends, with a status the client acts
on, when the client closes it (OK), sends bytes that are no frame (INVALID_ARGUMENT),
or this node stops leading (UNAVAILABLE, the leader's address, and the reason).
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any, AsyncIterator, Iterator

import grpc

from coordinator import tracing
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.errors import Rejection
from coordinator.transport import auth
from coordinator.transport.admission import WORK_OF_METHOD, Admission, refused_frame
from coordinator.transport.agent_ops import AgentOperation, AgentOps
from coordinator.transport.order_wakeups import OrderWakeups
from coordinator.transport.status_map import Refused

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 64  # frames of one session being processed at once; more wait to be read
# Answers waiting to be sent on one session. A client that sends frames but does not
# read its answers would otherwise have the node buffer them without bound; at this
# many the session reads no more frames until the client takes some, and gRPC's flow
# control then holds the client's sends.
OUTBOX_LIMIT = 256
# The unary RPC each frame kind stands for: a frame is authorized as that call would be.
RPC_OF_FRAME = {"register": "Register", "heartbeat": "Heartbeat", "commit_checkpoint": "CommitCheckpoint",
                "report_dependencies": "ReportDependencies", "ack_order": "AckOrder", "deregister": "Deregister",
                "watch_orders": "WatchOrders"}
LEADERSHIP_LOST = "this node stopped leading; re-open the session on the leader and re-send unanswered frames"


class AgentSession:
    """The server half of one Session call; `frames()` yields what to send."""

    def __init__(self, ops: AgentOps, wakeups: OrderWakeups, admission: Admission | None = None) -> None:
        self.ops, self.wakeups, self.admission = ops, wakeups, admission
        self.outbox: asyncio.Queue[pb.CoordinatorFrame | Refused | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._taken = asyncio.Event()  # set when frames() takes an answer out of the outbox
        self._held: tuple[str, str, int] | None = None  # the (group, agent, incarnation) whose lease this session holds
        self._ended = False
        # The frames answered in tasks of their own; a keepalive is answered by the reader (_keepalive).
        self._handlers: dict[str, AgentOperation] = {
            "register": ops.register, "commit_checkpoint": ops.commit_checkpoint,
            "report_dependencies": ops.report_dependencies, "ack_order": ops.ack_order,
            "deregister": ops.deregister}

    async def frames(self, requests: AsyncIterator[Any]) -> AsyncIterator[pb.CoordinatorFrame]:
        """Answer `requests` until the client closes; raises Refused to end the call."""
        self.ops.p.require_leader()
        reader = asyncio.create_task(self._read(requests))
        try:
            with self.wakeups.leadership_watch(self._leadership_lost):
                while True:
                    item = await self.outbox.get()
                    self._taken.set()
                    if item is None:
                        return
                    if isinstance(item, Refused):
                        raise item
                    yield item
        finally:
            reader.cancel()
            for task in [*self._tasks, *([self._watch] if self._watch else [])]:
                task.cancel()
            self.end()

    def end(self) -> None:
        """The call is over: release the lease this session holds, and take no other.

        Called when frames() ends and, by the servicer, when gRPC says the call
        terminated: a generator left suspended at a yield when its call is cancelled is
        only closed when it is collected, and a hold kept until then would keep a dead
        agent's lease. Idempotent."""
        self._hold(None)
        self._ended = True

    def _hold(self, held: tuple[str, str, int] | None) -> None:
        """A frame proved this incarnation live: hold its lease (None: none) from now on,
        releasing the one held before."""
        if self._ended and held is not None:
            return
        if held == self._held:
            if held is not None:
                self.ops.leases.prove(*held)
            return
        if self._held is not None:
            self.ops.leases.release(*self._held)
        self._held = held
        if held is not None:
            self.ops.leases.hold(*held)

    def _leadership_lost(self) -> None:
        self.end()  # now, not when the client has read the answers queued before the refusal
        refused = self.ops.p.not_leader(self.ops.p.node.leader_raft_address())
        self.outbox.put_nowait(Refused(refused.code, f"{refused.text}: {LEADERSHIP_LOST}", leader=refused.leader))

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for frame in requests:
                await self._room_in_outbox()
                if not isinstance(frame, pb.AgentFrame):  # the interceptor's stand-in for bytes that do not decode
                    self.outbox.put_nowait(Refused.of(Rejection.invalid(
                        "frame", f"does not decode: {getattr(frame, 'error', '')}")))
                    return
                if frame.WhichOneof("body") == "heartbeat":
                    # In a context of its own: the grant its admission sets (auth.PRINCIPAL)
                    # reaches neither the tasks this reader starts nor the next keepalive.
                    contextvars.copy_context().run(self._keepalive, frame)
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._answer(frame))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            self.outbox.put_nowait(None)  # the client half-closed and every frame is answered
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream broke under us; the call ends with it
            log.debug("session read ended: %r", exc)
            self.outbox.put_nowait(None)

    async def _room_in_outbox(self) -> None:
        while self.outbox.qsize() >= OUTBOX_LIMIT:
            self._taken.clear()
            await self._taken.wait()

    def _keepalive(self, frame: pb.AgentFrame) -> None:
        """Answer a keepalive where it was read, in the reader: it only reads the applied
        state and never waits, so a task of its own (created, scheduled, stepped and
        counted against the session's slots) would cost more than the keepalive itself."""
        try:
            refusal = self._refusal(frame, "heartbeat")
            if refusal is not None:
                self.outbox.put_nowait(refusal)
                return
            request = frame.heartbeat
            response = self.ops.keepalive_now(request)
            self._hold((request.group, request.agent_id, request.token.incarnation))
            self.outbox.put_nowait(pb.CoordinatorFrame(correlation=frame.correlation, heartbeat=response))
        except Exception as exc:
            self._unproved(frame.heartbeat)
            self.outbox.put_nowait(self._failed(frame, exc))

    def _unproved(self, request: Any) -> None:
        """A keepalive or watch of the agent this session holds was refused (not live any
        more, or no longer allowed): the session no longer speaks for it."""
        if self._held is not None and self._held[:2] == (request.group, request.agent_id):
            self._hold(None)

    async def _answer(self, frame: pb.AgentFrame) -> None:
        try:
            kind = frame.WhichOneof("body")
            if kind == "watch_orders":
                self._admit(RPC_OF_FRAME[kind], frame.watch_orders)
                self._start_watch(frame.correlation, frame.watch_orders)
                return
            handler = self._handlers.get(kind or "")
            if handler is None:
                raise Refused.of(Rejection.invalid("frame", "carries no operation"))
            request = getattr(frame, kind)
            # The frame's span covers its admission, as a unary call's does.
            with tracing.continued(f"{RPC_OF_FRAME[kind]} (session)", frame.trace_context):
                tracing.arrived()
                refusal = self._refusal(frame, kind)
                if refusal is not None:
                    self.outbox.put_nowait(refusal)
                    return
                with self._in_flight():
                    response = await handler(request, frame.issued_at or None)
            if kind == "register":
                self._hold((request.group, request.agent_id, response.incarnation))
            elif kind == "deregister":
                self._unproved(request)  # the agent left: its lease is gone too (Leases.forget)
            self.outbox.put_nowait(pb.CoordinatorFrame(correlation=frame.correlation, **{kind: response}))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.outbox.put_nowait(self._failed(frame, exc))
        finally:
            self._slots.release()

    def _refusal(self, frame: pb.AgentFrame, kind: str) -> pb.CoordinatorFrame | None:
        """Authorize the frame as its unary call (raises Refused), then admit it: the answer
        that sheds it, as the unary call would be shed (the client re-sends after the hint),
        or None to go on."""
        self._admit(RPC_OF_FRAME[kind], getattr(frame, kind))
        shed = self.admission.check(WORK_OF_METHOD[RPC_OF_FRAME[kind]]) if self.admission else None
        if shed is None:
            return None
        return pb.CoordinatorFrame(correlation=frame.correlation, status=refused_frame(shed))

    @staticmethod
    def _failed(frame: pb.AgentFrame, exc: Exception) -> pb.CoordinatorFrame:
        """The answer for a frame whose work raised: its refusal, or INTERNAL for a fault of ours."""
        if isinstance(exc, Refused):
            return pb.CoordinatorFrame(correlation=frame.correlation, status=exc.to_pb())
        log.error("session frame failed", exc_info=exc)
        return pb.CoordinatorFrame(correlation=frame.correlation, status=Refused(
            grpc.StatusCode.INTERNAL, "the coordinator failed to answer this frame").to_pb())

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        """A frame being answered is counted as an RPC in flight: it costs the node as much."""
        if self.admission is None:
            yield
            return
        self.admission.rpcs_in_flight += 1
        try:
            yield
        finally:
            self.admission.rpcs_in_flight -= 1

    @staticmethod
    def _admit(rpc: str, request: Any) -> None:
        """Authorize the frame's operation as its unary call (and seal its agent secret);
        raises Refused. In this frame's task only: its grant goes with its proposal."""
        check = auth.FRAME_CHECK.get()
        try:
            if check is not None:
                check(rpc, request)
            else:
                auth.admit_into_context(None, rpc, request, None)
        except Rejection as r:
            raise Refused.of(r) from None

    def _start_watch(self, correlation: int, request: pb.WatchOrdersRequest) -> None:
        """One watch per session: a new one (a new incarnation's) replaces the old."""
        if self._watch is not None:
            self._watch.cancel()
        self._watch = asyncio.create_task(self._push_orders(correlation, request))

    async def _push_orders(self, correlation: int, request: pb.WatchOrdersRequest) -> None:
        """Push the agent's orders as they are applied; end the watch with a status frame
        when its incarnation is fenced off (or the node stops leading)."""
        try:
            await self.ops.open_watch(request)
            sent: set[int] = set()
            first = True
            with self.wakeups.subscribe(request.group, request.agent_id) as wake:
                while True:
                    for order in self.ops.new_orders(request, wake, sent):
                        self.outbox.put_nowait(pb.CoordinatorFrame(correlation=correlation, order=order))
                    if first:  # the client's watch frame, its token found live: the session speaks
                        # for this incarnation. Later wake-ups are the coordinator's, no proof of the agent.
                        self._hold((request.group, request.agent_id, request.token.incarnation))
                        first = False
                    await wake.wait()
        except Refused as r:
            self._unproved(request)
            self.outbox.put_nowait(pb.CoordinatorFrame(correlation=correlation, status=r.to_pb()))
