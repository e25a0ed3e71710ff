"""Linearizable read points on the event loop: one read-index request at a time, shared
by every read that arrived while the one before was in flight (as etcd batches its
ReadIndex requests).

A read may be served from state that holds everything committed before it arrived,
once leadership was confirmed after it arrived (replication.read_index). A request
made after a read arrived serves it; one made before does not. So the reads that
arrive while a request is in flight wait for it to end and then share the next
request, made after all of them arrived (reads that arrive in one turn of the event
loop share the first). The Raft thread sees one request, starts one round and sends
one AppendEntries per follower for all of them, and the loop is woken once to settle
them, instead of once per read. Under load a read waits for at most two read rounds
and the window below; alone, for one round, as before.

Under concurrent reads (the request before served at least BUSY_GROUP) the next
request waits WINDOW_S for more to join. A round costs the three nodes about as much
CPU as a read's own gRPC call (an AppendEntries and its answer per follower, each
through Python on both sides), and without the window reads came about three to a
round even at 32 in flight (they reach the read point only as fast as the event loop
admits them), so rounds were about a third of a read's CPU; with it a round serves
four to nine (docs/benchmarks.md). A lone read never waits.

A request without an outcome `timeout_s` after it was made fails its reads with
NO_READ_POINT_IN_TIME and lets the next request go: an answer lost with a leadership
change holds up the reads behind it no longer than that.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable

ReadIndexRequest = Callable[[Callable[[str | None], None]], None]  # Replica.read_index
NO_READ_POINT_IN_TIME = "no read point in time"
# After a request that served at least BUSY_GROUP reads, the next one waits this long for more:
# short next to a read's latency under such load (15-25 ms at 32 in flight).
WINDOW_S = 0.003
BUSY_GROUP = 2


@dataclass(eq=False)
class _Group:
    """Reads that share one read-index request."""

    futures: list[asyncio.Future] = field(default_factory=list)
    guard: asyncio.TimerHandle | None = None
    settled: bool = False


class ReadPoints:
    """One event loop's reads, grouped onto read-index requests, at most one in flight."""

    def __init__(self, request: ReadIndexRequest, timeout_s: float) -> None:
        self._request = request  # raises (NotLeader) or calls back later, from any thread
        self._timeout_s = timeout_s
        self._in_flight: _Group | None = None
        self._next: _Group | None = None

    async def wait(self) -> str | None:
        """None at a read point made after this call, or the reason there is none (the
        node's, or NO_READ_POINT_IN_TIME); raises what the request raised."""
        loop = asyncio.get_running_loop()
        if self._next is None:
            self._next = _Group()
            if self._in_flight is None:
                loop.call_soon(self._send)
        future: asyncio.Future = loop.create_future()
        self._next.futures.append(future)
        return await future

    def _send(self) -> None:
        group, self._next = self._next, None
        if group is None or all(f.done() for f in group.futures):  # every caller gave up
            return
        self._in_flight = group
        loop = asyncio.get_running_loop()
        group.guard = loop.call_later(self._timeout_s, self._settle, group, NO_READ_POINT_IN_TIME)
        try:
            self._request(lambda outcome: loop.call_soon_threadsafe(self._settle, group, outcome))
        except Exception as exc:  # NotLeader, or a bug: every reader hears it
            for future in group.futures:
                if not future.done():
                    future.set_exception(exc)
            self._end(group)

    def _settle(self, group: _Group, outcome: str | None) -> None:
        """The group's outcome: the node's, or its guard's, whichever comes first."""
        if group.settled:
            return
        for future in group.futures:
            if not future.done():
                future.set_result(outcome)
        self._end(group)

    def _end(self, group: _Group) -> None:
        """The group in flight is over: the reads that arrived meanwhile go, after a
        window if this group was a busy one."""
        group.settled = True
        if group.guard is not None:
            group.guard.cancel()
        if self._in_flight is not group:
            return
        if len(group.futures) >= BUSY_GROUP:  # still "in flight": later reads keep joining _next
            asyncio.get_running_loop().call_later(WINDOW_S, self._window_over, group)
        else:
            self._window_over(group)

    def _window_over(self, group: _Group) -> None:
        if self._in_flight is group:
            self._in_flight = None
            self._send()
