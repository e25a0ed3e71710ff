"""Admission sheds on the event loop's lag only once two samples in a row saw it: one
pause of the process (a garbage collection, a test process's own work) is over by the
time it is measured, while overload keeps every sample late."""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable

import pytest

from coordinator.core.overload import AdmissionLimits, Work
from coordinator.observability.loop_lag import LoopLag
from coordinator.transport.admission import Admission

PAUSE_S = 1.0
# Well under the pause and well over what a loaded machine adds to a 50 ms sleep.
LIMITS = AdmissionLimits(lag_s=0.6, keepalive_lag_s=2.0)


@pytest.fixture
async def admission() -> AsyncIterator[Admission]:
    gate, stop = Admission(LIMITS, loop_lag=LoopLag(period_s=0.05)), asyncio.Event()
    sampling = asyncio.create_task(gate.run(stop))
    await asyncio.sleep(0.2)
    try:
        yield gate
    finally:
        stop.set()
        await asyncio.wait_for(sampling, 5)


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def test_one_pause_is_reported_but_sheds_nothing(admission: Admission) -> None:
    time.sleep(PAUSE_S)  # the loop stalls once
    await until(lambda: admission.loop_lag_s >= PAUSE_S * 0.8, "the pause was measured")
    assert admission.check(Work.WRITE) is None
    assert admission.loop_lag_sustained_s < LIMITS.lag_s


async def test_a_pause_seen_in_two_samples_in_a_row_sheds_writes(admission: Admission) -> None:
    time.sleep(PAUSE_S)
    await until(lambda: admission.loop_lag_s >= PAUSE_S * 0.8, "the first pause was measured")
    assert admission.check(Work.WRITE) is None
    time.sleep(PAUSE_S)  # before the next sample: that one is late as well
    await until(lambda: admission.loop_lag_sustained_s >= PAUSE_S * 0.8, "the second pause was measured")
    shed = admission.check(Work.WRITE)
    assert shed is not None and "lagging" in shed.why
    assert admission.check(Work.KEEPALIVE) is None  # under the keepalive bound
