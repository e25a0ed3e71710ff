"""The leader's clock follows the wall clock, but not across a step of it."""
from __future__ import annotations

import pytest

from coordinator.replication.leader_clock import LeaderClock


class Clocks:
    """A wall clock an operator can step and a monotonic clock that only runs."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_700_000_000.0, 50.0

    def run(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def clock(clocks: Clocks) -> LeaderClock:
    return LeaderClock(lambda: clocks.wall, lambda: clocks.mono)


@pytest.mark.parametrize("step", [3600.0, -3600.0, 5.0, -5.0])
def test_a_step_of_the_wall_clock_is_ignored_until_it_is_undone(clocks: Clocks, clock: LeaderClock,
                                                                 step: float) -> None:
    clocks.run(10)
    before = clock.now()
    clocks.wall += step
    clocks.run(2)
    assert clock.now() == pytest.approx(before + 2)
    assert clock.stepped_by == pytest.approx(step)
    clocks.wall -= step  # the operator puts it back
    clocks.run(1)
    assert clock.now() == pytest.approx(clocks.wall) and clock.stepped_by == 0


def test_slewing_within_ntp_limits_is_followed(clocks: Clocks, clock: LeaderClock) -> None:
    for _ in range(100):
        clocks.run(60)
        clocks.wall += 60 * 0.0005  # 500 ppm fast
        assert clock.now() == clocks.wall
    assert clock.stepped_by == 0


def test_a_leader_behind_the_replicated_clock_moves_forward_to_it(clocks: Clocks, clock: LeaderClock) -> None:
    clock.catch_up(clocks.wall + 3600)
    assert clock.now() == pytest.approx(clocks.wall + 3600)
    clock.catch_up(clocks.wall)  # never backwards
    assert clock.now() == pytest.approx(clocks.wall + 3600)


def test_a_step_long_after_the_last_reading_is_still_a_step(clocks: Clocks, clock: LeaderClock) -> None:
    """Between far-apart readings the slewing tolerance grows, but stays far below an hour."""
    clocks.run(24 * 3600)
    clocks.wall += 3600
    assert clock.now() == pytest.approx(clocks.wall - 3600)
