"""How late the node's asyncio event loop runs: a task that sleeps a short period and
measures by how much each sleep overshoots.

Every RPC, every lease renewal and every proposal's answer waits for the loop; its
lateness is how long a cheap request waits before it is even looked at. Admission
sheds load on it and the failure detector stops trusting its own silence
(core.overload); transport.admission exports the worst recent value as a gauge.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from coordinator.core.overload import LagWindow

PERIOD_S = 0.1
HORIZON_S = 10.0
# Lateness under this is timer jitter: not recorded, so an idle loop keeps an empty window.
NOISE_S = 0.002


class LoopLag:
    def __init__(self, period_s: float = PERIOD_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.period_s = period_s
        self._monotonic = monotonic
        self._window = LagWindow(HORIZON_S)
        self._waiting_since: float | None = None

    async def run(self, stop: asyncio.Event, on_sample: Callable[[], None] | None = None) -> None:
        """Sample until `stop` is set; `on_sample` runs after each sample."""
        while not stop.is_set():
            started = self._monotonic()
            self._waiting_since = started
            await asyncio.sleep(self.period_s)
            now = self._monotonic()
            self._waiting_since = None  # measured now: no longer pending
            if now - started - self.period_s > NOISE_S:
                self._window.add(now, now - started - self.period_s)
            else:
                self._window.on_time()
            if on_sample is not None:
                on_sample()

    def worst_since(self, since: float) -> float:
        """The worst lateness since `since` (monotonic seconds), including the sleep in
        progress if it is already overdue."""
        return max(self._window.worst_since(since), self._pending(), 0.0)

    def sustained_since(self, since: float) -> float:
        """The worst lateness seen in two samples in a row since `since`, an overdue sleep
        counting as the latest sample: what admission sheds on. One pause is over by the
        time it is measured, and shedding after it refuses calls the loop can serve."""
        return max(self._window.worst_twice_since(since), min(self._pending(), self._window.last_lag_s), 0.0)

    def _pending(self) -> float:
        """How overdue the sleep in progress is (negative while it is not)."""
        return 0.0 if self._waiting_since is None else self._monotonic() - self._waiting_since - self.period_s

    def recent(self, within_s: float = 1.0) -> float:
        return self.worst_since(self._monotonic() - within_s)
