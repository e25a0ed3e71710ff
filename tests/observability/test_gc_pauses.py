"""The node's collector tuning: thresholds raised, start-up objects frozen, pauses measured."""
from __future__ import annotations

import gc
from typing import Iterator

import pytest

from coordinator.observability import gc_pauses


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        while gc_pauses._measure in gc.callbacks:
            gc.callbacks.remove(gc_pauses._measure)


def test_tuning_raises_the_threshold_freezes_and_measures_pauses(restored_gc: None) -> None:
    class Cycle:
        pass

    gc_pauses.tune_for_serving()
    assert gc.get_threshold() == gc_pauses.THRESHOLDS
    assert gc.get_freeze_count() > 0  # what existed at start-up is no longer walked
    gc_pauses.tune_for_serving()  # idempotent: one callback, not two
    assert gc.callbacks.count(gc_pauses._measure) == 1
    for _ in range(2000):  # garbage only the cyclic collector can reclaim
        a, b = Cycle(), Cycle()
        a.other, b.other = b, a
    assert gc.collect() >= 2000
    assert 0 < gc_pauses.worst_recent_pause() < 60
