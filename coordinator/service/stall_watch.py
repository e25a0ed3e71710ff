"""The failure detector's check of the leader itself, once per detector tick.

It measures the window since the previous tick (its gap, the event loop's and the Raft
tick's worst lag in it, and the heartbeats admission shed in it) and asks
core.overload.stall_credit whether the leader could have heard keepalives meanwhile.
When not, the leader loop declares no failure that tick and extends every lease by
the window: an agent is never blamed for the leader's own overload.
"""
from __future__ import annotations

import time
from typing import Callable

from coordinator.core.overload import DetectorTick, stall_credit
from coordinator.transport.admission import Admission


class StallWatch:
    def __init__(self, admission: Admission, tick_lag_since: Callable[[float], float], period_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._admission, self._tick_lag_since = admission, tick_lag_since
        self.period_s = period_s
        self._monotonic = monotonic
        self._last: float | None = None
        self._shed_seen = admission.keepalives_shed

    def reset(self) -> None:
        """Not leading: the next window starts at the next tick (a takeover grants fresh leases)."""
        self._last = None
        self._shed_seen = self._admission.keepalives_shed

    def credit(self) -> float:
        """Seconds to add to every lease for the window ending now (0: the leader was healthy)."""
        now = self._monotonic()
        last, self._last = self._last, now
        shed, self._shed_seen = self._admission.keepalives_shed - self._shed_seen, self._admission.keepalives_shed
        if last is None:
            return 0.0
        return stall_credit(DetectorTick(gap_s=now - last, period_s=self.period_s,
                                         loop_lag_s=self._admission.loop_lag.worst_since(last),
                                         tick_lag_s=self._tick_lag_since(last), keepalives_shed=shed))
