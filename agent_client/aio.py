"""AsyncAgentClient: the asyncio face of the agent protocol.

It runs the same protocol operations as AgentClient (protocol.py) and only performs
their effects differently: RPCs on one session stream (agent_stream.py) or as
grpc.aio calls (AsyncConnection), blob and fsync work in worker threads
(asyncio.to_thread), user callbacks awaited when they are coroutine functions, and
keepalives and the order watcher (or pushed orders) as asyncio tasks on the
caller's loop. Use one client from one event loop.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import grpc

from agent_client.agent_stream import AsyncSessionStream, carries
from agent_client.background import RECONNECT_S, START_UP_GRACE_S, WATCH_STREAM_S, fenced_reason, stream_failed
from agent_client.blobstore import BlobStore
from agent_client.client_base import ClientBase
from agent_client.connection import AsyncConnection, CoordinatorUnavailable, Rejected
from agent_client.effects import Blocking, Callback, Effect, ProtocolOperation, Rpc, Watch, drive_async, operation_span
from agent_client.restored import Restored
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger("agent_client")
T = TypeVar("T")


class TaskLock:
    """A lock a task may take again while it holds it: users hold atomic() around
    unwrap(), which takes it too (asyncio.Lock would deadlock there)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self._depth = 0

    async def __aenter__(self) -> "TaskLock":
        me = asyncio.current_task()
        if self._owner is not me or me is None:
            await self._lock.acquire()
            self._owner = me
        self._depth += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


class AsyncAgentClient(ClientBase):
    """The asyncio client (constructor arguments: ClientBase); callbacks may be plain or
    coroutine functions."""

    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | str | Path,
                 **options: Any) -> None:
        super().__init__(group, agent_id, endpoints, blob_store, **options)
        self.conn = AsyncConnection(self.endpoints, deadline=self.deadline, token=self.token, tls=self.tls)
        self.stream = (AsyncSessionStream(self.conn, self._pushed, self._watch_ended)
                       if self.transport == "session" else None)
        self._orders: asyncio.Queue[pb.Order] | None = None
        # Clear from register() until the agent's next call: see _await_start_up.
        self._started = asyncio.Event()
        self._lock = TaskLock()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- effects ----------------------------------------------------------------------
    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Rpc):
            if self.stream is not None and carries(effect.service, effect.method):
                return await self.stream.call(effect.method, effect.request)
            return await self.conn.call(effect.service, effect.method, effect.request)
        if isinstance(effect, Watch):
            return await self.conn.collect("AgentService", "WatchOrders", effect.request, window=effect.window)
        if isinstance(effect, Blocking):
            with effect.traced():
                return effect.fn() if effect.quick else await asyncio.to_thread(effect.fn)
        if isinstance(effect, Callback):
            result = effect.fn()
            return (await result) if inspect.isawaitable(result) else result
        raise TypeError(f"unknown effect {effect!r}")

    async def _run(self, op: ProtocolOperation[T], *, registering: bool = False, span: str = "") -> T:
        async with self._lock:
            mark = self._mark()
            try:
                with operation_span(span, self.core.group, self.core.agent_id):
                    return await drive_async(op, self._perform)
            finally:
                if self._effects is not None and self._mark() != mark:  # the thread hop only when there is work
                    await asyncio.to_thread(self._settle_effects, mark)
                if registering:
                    self._started.clear()
                else:
                    self._started.set()

    # ---- lifecycle --------------------------------------------------------------------
    async def register(self) -> pb.RegisterResponse:
        resp = await self._run(self.core.register(), registering=True)
        if self.background:
            self.start_background()
        return resp

    def start_background(self) -> None:
        if self._tasks:
            self._watch()  # a new incarnation: its orders, not the old one's
            return
        orders = self._watch_orders() if self.stream is None else self._pushed_orders()
        self._tasks = [asyncio.create_task(self._keepalives(self.keepalive_every()), name="raftpoint-keepalive"),
                       asyncio.create_task(orders, name="raftpoint-orders")]
        self._watch()

    def _watch(self) -> None:
        if self.stream is not None:
            if self._orders is None:
                self._orders = asyncio.Queue()
            self.stream.watch(self.core.watch_request())

    def _pushed(self, order: pb.Order) -> None:
        if self._orders is not None:
            self._orders.put_nowait(order)

    async def _pushed_orders(self) -> None:
        """Carry out the orders the session pushes; after a failure, renew the watch so
        the coordinator pushes every order still pending again (background.PushedOrders)."""
        while not self.core.fenced:
            assert self._orders is not None
            order = await self._orders.get()
            await self._await_start_up()
            try:
                if self.core.wants(order):
                    await self.obey(order)
                continue
            except (Rejected, CoordinatorUnavailable) as exc:
                log.warning("order not carried out, will retry: %s", exc)
            except asyncio.CancelledError:
                raise
            except Exception:  # e.g. the agent's on_rollback raised: retry the order
                log.exception("order handling failed, will retry")
            await asyncio.sleep(RECONNECT_S)
            self._watch()

    async def _stop_background(self) -> None:
        tasks, self._tasks = self._tasks, []
        current = asyncio.current_task()
        for task in tasks:
            if task is not current:
                task.cancel()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)

    async def _keepalives(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.keepalive()
            except (Rejected, CoordinatorUnavailable) as exc:
                reason = fenced_reason(exc)
                if reason is not None:
                    self._fence(reason)
                    return

    def _fence(self, reason: str) -> None:
        """A newer incarnation exists (or we were declared failed): stop the background tasks."""
        self.core.fence(reason)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _watch_orders(self) -> None:
        """Keep a WatchOrders stream open; the server re-sends unacknowledged orders on
        every new stream, and obey() skips the ones already carried out."""
        while not self.core.fenced:
            call = None
            try:
                call = self.conn.stream("AgentService", "WatchOrders", self.core.watch_request(),
                                        timeout=WATCH_STREAM_S)
                async for order in call:
                    await self._await_start_up()
                    if self.core.wants(order):
                        await self.obey(order)
            except grpc.RpcError as err:
                reason = stream_failed(err, self.conn.redirect)
                if reason is not None:
                    self._fence(reason)
                    return
            except (Rejected, CoordinatorUnavailable) as exc:
                log.warning("order not carried out, will retry: %s", exc)
            except asyncio.CancelledError:
                raise
            except Exception:  # e.g. the agent's on_rollback raised: keep watching, retry the order
                log.exception("order handling failed, will retry")
            finally:
                if call is not None:
                    call.cancel()
            await asyncio.sleep(RECONNECT_S)

    async def keepalive(self) -> pb.HeartbeatResponse:
        return await drive_async(self.core.keepalive(), self._perform)  # no lock: it only reads the token

    async def close(self, *, deregister: bool = False) -> None:
        await self._stop_background()
        try:
            await self._run(self.core.close(deregister=deregister))
        except (Rejected, CoordinatorUnavailable) as exc:
            log.warning("close: %s", exc)
        finally:
            self._close_stores()
            if self.stream is not None:
                await self.stream.close()
            await self.conn.close()

    async def __aenter__(self) -> "AsyncAgentClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def atomic(self) -> TaskLock:
        """`async with client.atomic():` around unwrap() and the state change that goes
        with it, so an order carried out by the watcher task never sees one without the other."""
        return self._lock

    # ---- protocol operations ----------------------------------------------------------
    async def restore(self, meta: pb.CheckpointMeta | None = None, reason: str | None = None) -> Restored:
        return await self._run(self.core.restore(meta, reason), span="raftpoint.restore")

    async def checkpoint(self, state: Any = None, *, forced_index: int | None = None,
                         epoch: int | None = None) -> int:
        return await self._run(self.core.checkpoint(state, forced_index=forced_index, epoch=epoch), span="raftpoint.checkpoint")

    def wrap(self, payload: bytes, to: str) -> bytes:
        """Local only (no I/O): not awaited. Hold atomic() around it and the state change
        if the watcher task may checkpoint meanwhile."""
        self._started.set()  # the agent is at work: its orders may be carried out
        return self.core.wrap(payload, to)

    async def unwrap(self, envelope: bytes) -> bytes | None:
        return await self._run(self.core.unwrap(envelope))

    async def flush_dependencies(self) -> None:
        await self._run(self.core.flush_dependencies())

    async def pending_orders(self, window: float = 0.5) -> list[pb.Order]:
        return await self._run(self.core.pending_orders(window))

    async def obey(self, order: pb.Order) -> Restored | None:
        return await self._run(self.core.obey(order), span="raftpoint.obey")

    async def sync_orders(self, window: float = 0.5) -> list[pb.Order]:
        return await self._run(self.core.sync_orders(window))

    async def _await_start_up(self) -> None:
        """Watched orders wait from register() to the agent's next call (restore() and
        sync_orders() as the start-up goes): obeyed in between, the restore that follows
        would undo them (AgentClient._handle_order)."""
        try:
            await asyncio.wait_for(self._started.wait(), START_UP_GRACE_S)
        except TimeoutError:  # an agent that only waits for orders gets them
            pass

    async def side_effect(self, key: str, fn: Callable[[], Any], *, hold_until_stable: bool = False) -> Any:
        """AgentClient.side_effect; `fn` runs in a worker thread."""
        return await asyncio.to_thread(self._side_effect, key, fn, hold_until_stable)
