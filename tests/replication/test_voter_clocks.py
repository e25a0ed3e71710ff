"""The time a majority of the voters' clocks have reached bounds a leader's clock."""
from __future__ import annotations

import pytest

from coordinator.replication.leader_clock import TOLERANCE_S, LeaderClock
from coordinator.replication.voter_clocks import FRESH_S, VoterClocks

YEAR = 365 * 86400.0
NOW = 1_700_000_000.0
VOTERS = ("a", "b", "c")


def heard(readings: dict[str, float], received: float = 100.0) -> VoterClocks:
    clocks = VoterClocks()
    for voter, wall in readings.items():
        clocks.heard(voter, wall, received)
    return clocks


def test_a_leader_a_year_ahead_is_held_to_its_voters_clocks() -> None:
    clocks = heard({"b": NOW, "c": NOW - 0.2})
    assert clocks.agreed("a", NOW + YEAR, 100.0, VOTERS) == NOW


def test_one_voter_ahead_or_behind_moves_nothing() -> None:
    assert heard({"b": NOW + YEAR, "c": NOW}).agreed("a", NOW, 100.0, VOTERS) == NOW
    assert heard({"b": NOW - YEAR, "c": NOW}).agreed("a", NOW, 100.0, VOTERS) == NOW


def test_readings_age_on_the_monotonic_clock() -> None:
    clocks = heard({"b": NOW, "c": NOW}, received=100.0)
    assert clocks.agreed("a", NOW + YEAR, 107.5, VOTERS) == pytest.approx(NOW + 7.5)


def test_without_a_majority_of_fresh_readings_nothing_is_agreed() -> None:
    assert VoterClocks().agreed("a", NOW, 100.0, VOTERS) is None
    five = ("a", "b", "c", "d", "e")
    assert heard({"b": NOW}).agreed("a", NOW + YEAR, 100.0, five) is None
    stale = heard({"b": NOW, "c": NOW}, received=100.0)
    assert stale.agreed("a", NOW, 100.0 + FRESH_S + 1, VOTERS) is None
    assert heard({"b": NOW, "c": NOW}).agreed("a", NOW + YEAR, 100.0, five) == NOW  # 3 of 5 is a majority


def test_a_single_voter_is_its_own_majority() -> None:
    assert VoterClocks().agreed("a", NOW + YEAR, 100.0, ("a",)) == NOW + YEAR


class Ceiling:
    def __init__(self) -> None:
        self.agreed: float | None = None

    def __call__(self, own: float) -> float | None:
        return self.agreed


def test_a_clock_ahead_of_its_ceiling_reads_the_ceiling_and_its_own_again_once_in_line() -> None:
    ceiling = Ceiling()
    clock = LeaderClock(lambda: NOW + YEAR, lambda: 0.0, ceiling)
    assert clock.now() == NOW + YEAR  # nothing known: nothing bounds it
    ceiling.agreed = NOW
    assert clock.now() == NOW + TOLERANCE_S
    assert clock.ahead_by == pytest.approx(YEAR)
    ceiling.agreed = NOW + YEAR - TOLERANCE_S / 2  # the voters' clocks say the same now
    assert clock.now() == NOW + YEAR
    assert clock.ahead_by == 0.0


def test_a_clock_behind_its_ceiling_is_not_moved_by_it() -> None:
    ceiling = Ceiling()
    ceiling.agreed = NOW + 100
    assert LeaderClock(lambda: NOW, lambda: 0.0, ceiling).now() == NOW
