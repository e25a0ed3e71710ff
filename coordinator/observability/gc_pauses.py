"""The interpreter's garbage collector, tuned for a server that holds thousands of
sessions, and its pauses measured.

At 2,000 connected agents a leader's full collections took 120-370 ms each (the
collector walks every tracked object: each session's tasks, queues and call
objects), and every pause stalls the event loop and the Raft thread alike: they
were the keepalive p99. Two remedies, both standard for long-running CPython
servers:

- `gc.freeze()` once the node is up: what start-up built (modules, the state
  machine's tables, gRPC's machinery) lives as long as the process, so later full
  collections need not walk it again.
- A larger first-generation threshold: collections run less often; the work per
  collection grows with the objects allocated since, not with the heap.

Automatic collection stays on: reference cycles are still reclaimed.
"""
from __future__ import annotations

import gc
import time
from collections import deque

# gen0 at 50,000 allocations (CPython's default is 700); gen1 and gen2 as CPython has them.
THRESHOLDS = (50_000, 10, 10)
WINDOW_S = 60.0

# (when it ended, how long it took). The collector may run in any thread at any
# allocation, even inside a metrics call holding its lock: the callback therefore only
# appends (atomic in CPython), and the scrape thread reads (worst_recent_pause).
_pauses: deque[tuple[float, float]] = deque(maxlen=4096)
_started: list[float] = []


def _measure(phase: str, info: dict) -> None:
    now = time.monotonic()
    if phase == "start":
        _started.append(now)
    elif _started:
        _pauses.append((now, now - _started.pop()))


def worst_recent_pause() -> float:
    """The longest collection that ended within the last WINDOW_S seconds."""
    since = time.monotonic() - WINDOW_S
    return max((d for at, d in list(_pauses) if at >= since), default=0.0)


def tune_for_serving() -> None:
    """Call once the node has started (its long-lived objects exist)."""
    gc.set_threshold(*THRESHOLDS)
    gc.collect()
    gc.freeze()
    if _measure not in gc.callbacks:
        gc.callbacks.append(_measure)
