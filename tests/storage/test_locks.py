"""SharedExclusiveLock: shared holders together, exclusive alone, bounded waits."""
from __future__ import annotations

import threading
import time

import pytest

from coordinator.harness.local_cluster import wait_for
from coordinator.locks import SharedExclusiveLock


def test_shared_holders_coexist_and_exclude_an_exclusive_one() -> None:
    lock = SharedExclusiveLock()
    with lock.shared(), lock.shared(timeout=0.1):
        with pytest.raises(TimeoutError):
            with lock.exclusive(timeout=0.05):
                pass
    with lock.exclusive(timeout=0.1):
        with pytest.raises(TimeoutError):
            with lock.shared(timeout=0.05):
                pass
    with lock.shared(timeout=0.1):  # everything was released, timeouts included
        pass


@pytest.mark.slow
def test_a_waiting_exclusive_holder_blocks_new_shared_ones_until_it_gives_up() -> None:
    lock = SharedExclusiveLock()
    outcome: list[str] = []

    def exclusive() -> None:
        try:
            with lock.exclusive(timeout=2.0):
                outcome.append("acquired")
        except TimeoutError:
            outcome.append("timed out")

    def shared_refused() -> bool:
        try:
            with lock.shared(timeout=0.02):
                return False
        except TimeoutError:
            return True

    waited: list[float] = []

    def shared_waiter() -> None:
        started = time.monotonic()
        with lock.shared(timeout=30):
            waited.append(time.monotonic() - started)

    with lock.shared():
        thread = threading.Thread(target=exclusive)
        thread.start()
        wait_for(shared_refused, "the exclusive waiter to hold new shared holders back", 2.0, 0.01)
        waiter = threading.Thread(target=shared_waiter)
        waiter.start()  # blocked behind the exclusive waiter, woken when it gives up
        thread.join(5)
        waiter.join(10)
    assert outcome == ["timed out"]
    assert waited and waited[0] < 10  # not left waiting for its own 30 s timeout
