"""One warning per interval for an event that arrives in floods.

Each connection a node refuses is worth knowing about, but one line each let a
stranger write 3,485 lines in 30 s to a node's log. A `LogTally` writes the first
occurrence at once; later ones are counted, and one line per `interval_s` says how
many there were since the last line, by kind, with the latest one's detail. The
counters in metrics count every occurrence; the log stays readable.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable

DEFAULT_INTERVAL_S = 10.0


class LogTally:
    """`emit(event, **fields)` (a structlog logger's warning) at most once per
    `interval_s`; thread-safe. `flush()` writes the pending count once its interval
    is over, so the end of a flood is reported without another occurrence."""

    def __init__(self, emit: Callable[..., object], event: str, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit, self._event, self.interval_s, self._clock = emit, event, interval_s, clock
        self._lock = threading.Lock()
        self._pending: Counter[str] = Counter()
        self._latest = ""
        self._last_line_at = float("-inf")

    def note(self, kind: str, detail: str) -> None:
        """One occurrence of `kind` (a short label), `detail` saying what happened."""
        with self._lock:
            self._pending[kind] += 1
            self._latest = detail
            self._write_if_due()

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._write_if_due()

    def _write_if_due(self) -> None:
        now = self._clock()
        if now - self._last_line_at < self.interval_s:
            return
        count = sum(self._pending.values())
        self._emit(self._event, count=count, by_kind=dict(self._pending), latest=self._latest,
                   since_s=None if self._last_line_at == float("-inf") else round(now - self._last_line_at, 1),
                   next_line_in_s=self.interval_s)
        self._pending.clear()
        self._last_line_at = now
