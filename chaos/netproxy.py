"""A userspace TCP proxy per link, for network faults without `tc netem`.

Every link listens on one loopback address and forwards each accepted connection
to one loopback target, applying the link's `LinkFaults` (chaos.linkfaults) per
direction: pass, delay with jitter (order kept), or drop (a blackhole); per link:
partition and flaky resets. The proxy runs its own asyncio loop on a thread, so
synchronous code (the chaos runner, tests) drives it with plain method calls that
return as soon as the change is in force.

Bounded: each direction of a connection buffers at most QUEUE_CHUNKS reads of
CHUNK bytes; when that is full the proxy stops reading and TCP flow control pushes
back on the sender, as a slow network would. A link holds at most MAX_CONNECTIONS.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Coroutine, TypeVar

from chaos.linkfaults import (DIRECTIONS, DOWN, FLAKY_TICK_S, HEALTHY, UP, FlakyDice, LinkFaults, Mode, Partition,
                              loopback_address, must_reset_on_change, release_time)

T = TypeVar("T")
CHUNK = 64 * 1024
QUEUE_CHUNKS = 16
MAX_CONNECTIONS = 256
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 10.0
_END_WITH_FIN, _END_SILENTLY = True, False  # queue markers after the last chunk


@dataclass(frozen=True)
class LinkStats:
    """Counters since the link was added. `reset` counts every connection the proxy
    reset (partition, flaky, heal after a drop, refused at accept); `rejected` the
    part of those accepted during a partition or over the connection limit."""

    forwarded_up: int = 0
    forwarded_down: int = 0
    dropped_up: int = 0
    dropped_down: int = 0
    accepted: int = 0
    reset: int = 0
    rejected: int = 0
    open: int = 0

    def forwarded(self, direction: str) -> int:
        return self.forwarded_up if direction == UP else self.forwarded_down

    def dropped(self, direction: str) -> int:
        return self.dropped_up if direction == UP else self.dropped_down


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0), so the peer sees ECONNRESET at once, not a clean EOF."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class _Connection:
    def __init__(self, cid: int, client: asyncio.StreamWriter) -> None:
        self.id = cid
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.dropped = {UP: False, DOWN: False}
        self.task: asyncio.Task | None = None

    def writer(self, direction: str) -> asyncio.StreamWriter | None:
        """Where bytes of `direction` are written."""
        return self.upstream if direction == UP else self.client

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class _Link:
    def __init__(self, name: str, listen: tuple[str, int], target: tuple[str, int], seed: int) -> None:
        self.name = name
        self.host, self.port = listen
        self.target = target
        self.faults = HEALTHY
        self.counts = {f.name: 0 for f in dataclasses.fields(LinkStats) if f.name != "open"}
        self.connections: dict[int, _Connection] = {}
        self._ids = itertools.count(1)
        self._delay_rng = random.Random(f"{seed}/{name}/delay")
        self._dice = FlakyDice(f"{seed}/{name}/flaky")
        self._server: asyncio.AbstractServer | None = None
        self._flaky_task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stats(self) -> LinkStats:
        return LinkStats(**{**self.counts, "open": len(self.connections)})

    async def listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # ---- faults ---------------------------------------------------------------------
    async def apply(self, new: LinkFaults) -> None:
        old, self.faults = self.faults, new
        if new.rejects_connections and not old.rejects_connections:
            self._reset_all()
        if new.partition is Partition.REFUSE and self._server is not None:
            await self.stop_listening()
        elif new.partition is not Partition.REFUSE and self._server is None:
            await self.listen()
        for direction in DIRECTIONS:
            was, now = old.effective(direction), new.effective(direction)
            for conn in list(self.connections.values()):
                if must_reset_on_change(was, now, conn.dropped[direction]):
                    self._reset_one(conn)
        if new.flaky_p > 0 and self._flaky_task is None:
            self._flaky_task = asyncio.create_task(self._flaky())
        elif new.flaky_p == 0 and self._flaky_task is not None:
            self._flaky_task.cancel()
            self._flaky_task = None

    def _reset_one(self, conn: _Connection) -> None:
        if self.connections.pop(conn.id, None) is not None:
            self.counts["reset"] += 1
            conn.reset()

    def _reset_all(self) -> None:
        for conn in list(self.connections.values()):
            self._reset_one(conn)

    async def _flaky(self) -> None:
        while True:
            await asyncio.sleep(FLAKY_TICK_S)
            for cid in self._dice.resets(list(self.connections), self.faults.flaky_p):
                self._reset_one(self.connections[cid])

    async def close(self) -> None:
        if self._flaky_task is not None:
            self._flaky_task.cancel()
        await self.stop_listening()
        for conn in list(self.connections.values()):
            self.connections.pop(conn.id, None)
            conn.reset()

    # ---- forwarding -----------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counts["accepted"] += 1
        if self.faults.rejects_connections or len(self.connections) >= MAX_CONNECTIONS:
            self.counts["rejected"] += 1
            self.counts["reset"] += 1
            _reset(writer)
            return
        conn = _Connection(next(self._ids), writer)
        conn.task = asyncio.current_task()
        self.connections[conn.id] = conn
        try:
            try:
                up_reader, conn.upstream = await asyncio.wait_for(asyncio.open_connection(*self.target),
                                                                  CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError):
                _reset(writer)  # the target is down: the dialer sees what it would see directly
                return
            if conn.id not in self.connections:  # a partition or reset began while connecting
                conn.reset()
                return
            pumps = [asyncio.create_task(self._pump(conn, UP, reader)),
                     asyncio.create_task(self._pump(conn, DOWN, up_reader))]
            try:
                done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for task in pumps:
                    task.cancel()
            if pending or any(t.exception() is not None for t in done):  # a side was reset: pass it on
                conn.reset()
            else:
                conn.client.close()
                conn.upstream.close()
        except asyncio.CancelledError:
            conn.reset()  # reset() cancelled us, or the proxy is closing
        finally:
            self.connections.pop(conn.id, None)

    async def _pump(self, conn: _Connection, direction: str, reader: asyncio.StreamReader) -> None:
        """Read one direction, apply its fault, and hand chunks to a writer task through
        a bounded queue stamped with release times (so delays keep byte order)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | bool] = asyncio.Queue(QUEUE_CHUNKS)
        sender = asyncio.create_task(self._send(conn, direction, queue))
        last = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                fault = self.faults.effective(direction)
                if fault.mode is Mode.DROP:
                    conn.dropped[direction] = True
                    self.counts[f"dropped_{direction}"] += len(data)
                    if not data:
                        # A blackhole loses the FIN too: the far end learns of the close
                        # by its own timeout, or by the reset when the direction heals.
                        await queue.put(_END_SILENTLY)
                        break
                    continue
                if not data:
                    await queue.put(_END_WITH_FIN)
                    break
                last = release_time(last, loop.time(), fault, self._delay_rng)
                await queue.put((last, data))
            await sender
        finally:
            sender.cancel()

    async def _send(self, conn: _Connection, direction: str, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        writer = conn.writer(direction)
        assert writer is not None
        while True:
            item = await queue.get()
            if item is _END_WITH_FIN:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            if item is _END_SILENTLY:
                return
            at, data = item
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            self.counts[f"forwarded_{direction}"] += len(data)


class NetProxy:
    """Links by name, all served by one event loop on a daemon thread.

    `seed` makes jitter and flaky resets reproducible per link name."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._links: dict[str, _Link] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netproxy", daemon=True)
        self._thread.start()
        self._closed = False

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the proxy is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_S)

    def _link(self, name: str) -> _Link:
        try:
            return self._links[name]
        except KeyError:
            raise KeyError(f"no link named {name!r}") from None

    def add_link(self, name: str, target: str, listen: str = "127.0.0.1:0") -> str:
        """Start forwarding `listen` to `target` (both in 127.0.0.0/8); returns the
        address actually listened on (port 0 picks a free one)."""
        if name in self._links:
            raise ValueError(f"link {name!r} exists")
        link = _Link(name, loopback_address(listen, "listen address"), loopback_address(target, "target"), self.seed)

        async def start() -> None:
            await link.listen()

        self._call(start())
        self._links[name] = link
        return link.address

    def address(self, name: str) -> str:
        return self._link(name).address

    def links(self) -> list[str]:
        return list(self._links)

    def faults(self, name: str) -> LinkFaults:
        return self._link(name).faults

    def set_faults(self, name: str, faults: LinkFaults) -> None:
        """Put `faults` in force on the link (replacing what was); returns once applied."""
        self._call(self._link(name).apply(faults))

    def update(self, name: str, **changes: Any) -> LinkFaults:
        """Change some fields of the link's faults (e.g. `up=DROP`); returns the result."""
        new = dataclasses.replace(self.faults(name), **changes)
        self.set_faults(name, new)
        return new

    def heal(self, name: str | None = None) -> None:
        """Back to pass-through: one link, or every link."""
        for link in [self._link(name)] if name is not None else list(self._links.values()):
            self.set_faults(link.name, HEALTHY)

    def stats(self, name: str) -> LinkStats:
        link = self._link(name)

        async def read() -> LinkStats:
            return link.stats()

        return self._call(read())

    def close(self) -> None:
        """Reset every connection, stop listening, stop the loop and its thread."""
        if self._closed:
            return

        async def close_all() -> None:
            for link in self._links.values():
                await link.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._call(close_all())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CALL_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> "NetProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
