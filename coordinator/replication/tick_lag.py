"""How late the Raft thread's ticks run: its actual period against the intended one.

pysyncobj ticks every `auto_tick_period` (sooner when a message arrives). A tick that
comes much later than that means the Raft thread could not get the interpreter (the
event loop held it) or was stuck in I/O; Raft heartbeats then go out late, and past
the election timeout followers depose a healthy leader. Admission sheds load on it,
and the failure detector stops trusting its own silence (core.overload).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from coordinator.core.overload import LagWindow

HORIZON_S = 10.0
# Lateness under this is the poller's normal jitter: not recorded, so an idle tick costs
# one clock read and a comparison.
NOISE_S = 0.002


class TickLag:
    """Fed by the Raft thread at the end of every tick, read by the event loop."""

    def __init__(self, period_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.period_s = period_s
        self._monotonic = monotonic
        self._last: float | None = None
        self._window = LagWindow(HORIZON_S)
        self._lock = threading.Lock()

    def tick(self) -> None:
        now = self._monotonic()
        last, self._last = self._last, now
        if last is not None and now - last - self.period_s > NOISE_S:
            with self._lock:
                self._window.add(now, now - last - self.period_s)
        else:
            self._window.on_time()

    def worst_since(self, since: float) -> float:
        """The worst lateness recorded since `since` (monotonic seconds), counting the
        tick still being waited for: a Raft thread stuck for good must show as lagging."""
        now = self._monotonic()
        with self._lock:
            worst = self._window.worst_since(since)
        pending = 0.0 if self._last is None else now - self._last - self.period_s
        return max(worst, pending, 0.0)

    def recent(self, within_s: float = 1.0) -> float:
        return self.worst_since(self._monotonic() - within_s)
