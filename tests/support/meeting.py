"""Callers held until enough of them are under way at once: how a test sees, by
counting rather than by timing, that calls overlap."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Iterator

DEADLINE_S = 20.0  # on a loaded machine, still far past what meeting takes


class Meeting:
    """Holds each caller until `size` callers are inside at once (or the deadline
    passed, or `open()`: then nobody waits); counts the most that were inside together."""

    def __init__(self, size: int) -> None:
        self.size, self.inside, self.most = size, 0, 0
        self._cond = threading.Condition()
        self._open = False

    @contextmanager
    def attended(self) -> Iterator[None]:
        """Wait for the others (`wait`), run the caller's block, then `leave`."""
        self.wait()
        try:
            yield
        finally:
            self.leave()

    def wait(self) -> None:
        with self._cond:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self.most >= self.size or self._open, DEADLINE_S):
                self.open()

    def leave(self) -> None:
        with self._cond:
            self.inside -= 1

    def open(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def reached(self, inside: int) -> bool:
        """Whether `inside` callers are waiting, within the deadline."""
        with self._cond:
            return self._cond.wait_for(lambda: self.inside >= inside, DEADLINE_S)


def finished_within(future: Future[Any], seconds: float) -> bool:
    """Whether `future` finishes within `seconds` (it is expected not to: blocked)."""
    try:
        future.result(timeout=seconds)
    except TimeoutError:
        return False
    return True
