"""The node's readiness and liveness as the HTTP probes answer them (/readyz, /livez).

The gRPC health loop (transport/server.py) decides both every half second and
`publish`es them here; the probe server's threads only read the last report, so a
probe costs no Raft or store work. A report older than `STALE_AFTER_S` fails both
probes: the loop that writes it runs on the node's event loop, and a node whose event
loop has stopped answers no gRPC call either (the exec probe's call timed out there).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

READY_PATH = "/readyz"
LIVE_PATH = "/livez"
# Ten health periods: a loaded 2-core node runs its loop late, never this late while it serves.
STALE_AFTER_S = 5.0


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: ok, or the one-line reason it is not (nothing an unauthenticated caller must not see)."""

    ok: bool
    reason: str

    @property
    def status(self) -> tuple[int, str]:
        return (200, "OK") if self.ok else (503, "Service Unavailable")


STARTING = Verdict(False, "starting: the node has not reported its health yet")


class HealthReport:
    """The last readiness and liveness the node reported, and when (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, stale_after_s: float = STALE_AFTER_S) -> None:
        self._clock, self._stale_after_s = clock, stale_after_s
        self._lock = threading.Lock()
        self._ready, self._live, self._at = STARTING, STARTING, None  # type: Verdict, Verdict, float | None

    def publish(self, ready: Verdict, live: Verdict) -> None:
        with self._lock:
            self._ready, self._live, self._at = ready, live, self._clock()

    def verdict(self, path: str) -> Verdict | None:
        """The answer for a probe path (READY_PATH, LIVE_PATH); None for any other path."""
        with self._lock:
            ready, live, at = self._ready, self._live, self._at
        if path not in (READY_PATH, LIVE_PATH):
            return None
        if at is not None and (age := self._clock() - at) > self._stale_after_s:
            return Verdict(False, f"no health report for {age:.0f} s: the node's event loop is stalled")
        return ready if path == READY_PATH else live
