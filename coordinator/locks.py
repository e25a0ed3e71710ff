"""A shared/exclusive lock (stdlib has none)."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class SharedExclusiveLock:
    """Many shared holders or one exclusive holder. Exclusive waiters block new shared
    holders, so a stream of shared users cannot starve an exclusive one. A `timeout`
    (seconds) bounds the wait: TimeoutError, and nothing is held, when it passes."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self, timeout: float | None = None) -> Iterator[None]:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._exclusive and not self._waiting, timeout):
                raise TimeoutError(f"shared lock not acquired within {timeout}s")
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self, timeout: float | None = None) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            acquired = self._cond.wait_for(lambda: not self._exclusive and not self._shared, timeout)
            self._waiting -= 1
            if not acquired:
                self._cond.notify_all()  # shared waiters held back by this waiter may go on
                raise TimeoutError(f"exclusive lock not acquired within {timeout}s")
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
