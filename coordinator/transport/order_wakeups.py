"""Wake-ups for order streams, pushed from the applier instead of polled.

The replica calls `signal()` from its Raft thread after each group commit with the
agents whose orders or record (liveness, incarnation) the committed entries changed
(`storage.state.agent_changes`); the hub hops to the event loop once per commit
(`call_soon_threadsafe`) and wakes only the subscriptions of those (group, agent)
pairs, telling each which order ids to read. A stream therefore reads the state once
per change that concerns it, and an idle agent costs the leader nothing.

Wake-ups for everyone (`None`): a snapshot install replaced the state wholesale, or
this node stopped leading (`follow_leadership`), which every stream must notice and
end on. A lost wake-up can only delay an order, never leak one: every read re-checks
leadership and the subscriber's fence against the applied state.

A wake-up carries when its commit was signalled, so a stream can tell how long a
rollback order took from its commit to its push (raftpoint_rollback_delivery_seconds):
only for orders committed while the stream was open; a stream's first read has no
such time.
"""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from coordinator.observability import metrics
from coordinator.storage.state import AgentChange

LEADERSHIP_CHECK_S = 0.1  # one check per node, not per stream


class Subscription:
    """One stream's wake-ups: which of the agent's orders to read next, or all of them."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._order_ids: set[int] | None = None  # None: read them all (the first read, or a full wake-up)
        self._everything = True
        # Per order id woken for, when its commit was signalled (time.monotonic()): those
        # not yet taken, and those of the last take().
        self._committed_at: dict[int, float] = {}
        self._taken_at: dict[int, float] = {}

    def wake(self, order_id: int | None, everything: bool = False, committed_at: float | None = None) -> None:
        if everything:
            self._everything = True
        elif order_id is not None and self._order_ids is not None:
            self._order_ids.add(order_id)
            if committed_at is not None:
                self._committed_at.setdefault(order_id, committed_at)
        self.event.set()

    def take(self) -> set[int] | None:
        """The order ids to read (possibly none: only the fence to re-check), or None for all;
        clears the wake-up."""
        self.event.clear()
        self._taken_at, self._committed_at = self._committed_at, {}
        if self._everything:
            self._everything, self._order_ids = False, set()
            return None
        ids, self._order_ids = self._order_ids, set()
        return ids

    def rollbacks_sent(self, order_ids: Iterable[int]) -> None:
        """These rollback orders of the last take() are being pushed: each one woken for
        is timed from its commit (the others were there before the stream was)."""
        now = time.monotonic()
        for order_id in order_ids:
            committed_at = self._taken_at.pop(order_id, None)
            if committed_at is not None:
                metrics.ROLLBACK_DELIVERY_SECONDS.observe(now - committed_at)

    async def wait(self) -> None:
        await self.event.wait()


class OrderWakeups:
    """Satisfies the replica's change listener; one per gRPC server, used on its loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._subs: dict[tuple[str, str], set[Subscription]] = defaultdict(set)
        self._all: set[Subscription] = set()
        self._on_lost: set[Callable[[], None]] = set()

    def signal(self, changes: Iterable[AgentChange] | None) -> None:
        """From any thread: these agents' orders or records changed (None: anything may have)."""
        batch = None if changes is None else list(changes)
        if batch == []:
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, batch, time.monotonic())
        except RuntimeError:  # the loop closed: the server is gone, no one to wake
            pass

    def wake_all(self) -> None:
        for sub in self._all:
            sub.wake(None, everything=True)

    def _deliver(self, batch: list[AgentChange] | None, committed_at: float) -> None:
        if batch is None:
            self.wake_all()
            return
        for group, agent_id, order_id in batch:
            for sub in self._subs.get((group, agent_id), ()):
                sub.wake(order_id, committed_at=committed_at)

    @contextmanager
    def subscribe(self, group: str, agent_id: str) -> Iterator[Subscription]:
        """A subscription to this agent's changes while the block runs; it starts awake."""
        sub = Subscription()
        key = (group, agent_id)
        self._subs[key].add(sub)
        self._all.add(sub)
        try:
            yield sub
        finally:
            self._all.discard(sub)
            subs = self._subs.get(key)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[key]

    @contextmanager
    def leadership_watch(self, on_lost: Callable[[], None]) -> Iterator[None]:
        """`on_lost()` (on the loop) if this node stops leading while the block runs."""
        self._on_lost.add(on_lost)
        try:
            yield
        finally:
            self._on_lost.discard(on_lost)

    async def follow_leadership(self, is_leader: Callable[[], bool], stop: asyncio.Event) -> None:
        """Wake every stream and tell every session when this node stops leading, so each
        ends with UNAVAILABLE and its client follows the new leader."""
        leading = False
        while not stop.is_set():
            now = is_leader()
            if leading and not now:
                self.wake_all()
                for on_lost in list(self._on_lost):
                    on_lost()
            leading = now
            try:
                await asyncio.wait_for(stop.wait(), LEADERSHIP_CHECK_S)
            except TimeoutError:
                pass
