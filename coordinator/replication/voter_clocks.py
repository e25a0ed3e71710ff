"""The wall-clock time a majority of the voters agree has been reached.

The replicated clock (core.dedupe's `clock_ms`) only ever rises, and the leader's
proposals set it. A node started with its clock far ahead (a year, after a bad RTC
or a VM restored with a wrong date) that wins an election would push it that far at
its first proposal, and every honest request, stamped with its client's real time,
would then be refused as too old on every node, for good. A running node never lets
its own clock jump (leader_clock), but a node *started* wrong has nothing of its own
to compare with: its peers' clocks are the reference.

So every follower stamps its answers to the leader's AppendEntries with its own
wall-clock reading, and the leader keeps the latest from each voter together with
its monotonic time of arrival. A voter's clock now is estimated as its reading plus
the monotonic time since. The agreed time is the largest time that at least a
majority of the voters' clocks (the leader's own among them) have reached: the
majority-th largest estimate. One clock alone (any one, the leader's included)
can neither push it forward nor hold it back while a majority's clocks are right.
Voters not heard from recently count as not reached: with fewer than a majority
heard, the agreed time is unknown, and what is known is never too high.

Pure: readings and times are passed in, the caller owns the threads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

# A voter's reading older than this (on the monotonic clock) is not counted: a
# node restarted with another clock may not have answered since.
FRESH_S = 30.0


@dataclass(frozen=True)
class Reading:
    wall: float       # the voter's wall clock, as it answered
    received: float   # the leader's monotonic clock when the answer arrived


class VoterClocks:
    """The latest clock reading of each voter, by Raft address."""

    def __init__(self) -> None:
        self._readings: dict[str, Reading] = {}

    def heard(self, voter: str, wall: float, received: float) -> None:
        self._readings[voter] = Reading(wall, received)

    def agreed(self, me: str, own_wall: float, now: float, voters: Iterable[str]) -> float | None:
        """The largest time a majority of `voters` (this node, `me`, reading
        `own_wall`) have reached at monotonic time `now`; None while fewer than a
        majority have fresh readings.

        Chaos seam: `unbounded-clock` (chaos/planted.py) replaces it with one that never agrees."""
        voters = frozenset(voters) | {me}
        estimates = [own_wall]
        for voter in voters - {me}:
            reading = self._readings.get(voter)
            if reading is not None and 0 <= now - reading.received <= FRESH_S:
                estimates.append(reading.wall + (now - reading.received))
        majority = len(voters) // 2 + 1
        if len(estimates) < majority:
            return None
        return sorted(estimates, reverse=True)[majority - 1]
