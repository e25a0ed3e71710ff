"""The time a leader stamps on its proposals, which a step of the system clock cannot move.

Every replicated time comes from the leader's proposals: `proposed_at` drives the
dedupe table's clock and watermark (core.dedupe), and it stamps epochs' starts and
deadlines. The dedupe watermark only ever rises (that is what makes forgetting
safe), so one proposal stamped an hour ahead would make every honest request look
an hour old and be refused until real time caught up -- on every leader, for good.

So a running node never lets its wall clock jump. The clock reads the wall clock
and the monotonic clock together and keeps their offset: while the wall clock
moves as the monotonic one does (within a tolerance that grows with the time
between two readings, to follow NTP's gradual slewing of at most 500 ppm), it is
believed, and the offset follows it. When it jumps (an operator's `date -s`, a VM
restored from a snapshot, NTP stepping), the clock goes on from the monotonic
clock plus the last believed offset, logs the step once, and returns to the wall
clock when that comes back within the tolerance. A step is therefore ignored for
as long as it lasts: no write is refused because of it, and no lease or epoch
deadline moves.

What it cannot tell alone is a node *started* with a wrong clock: it has no
earlier reading to compare with. A clock behind the replicated one is caught at
takeover (`catch_up`: the leader moves forward to the clock the log already
holds, which earlier leaders agreed on). A clock ahead is held to its `ceiling`:
on a leader, the time a majority of the voters' clocks have reached
(voter_clocks; until a majority has answered lately, the Batcher waits one read
round before the term's first proposal, in which every voter answers). The clock
reads no further ahead than the ceiling (plus the tolerance)
and keeps its own offset, so it follows its own wall clock again the moment that
comes back in line. Leases never use the wall clock at all: they are measured on
the monotonic clock from the leader's takeover.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

log = logging.getLogger(__name__)

# A wall clock this far from where the monotonic clock puts it has stepped.
TOLERANCE_S = 1.0
# Plus this much per second between two readings: NTP slews at most 500 ppm.
SLEW_PER_S = 0.001


def _system_wall() -> float:
    return time.time()  # looked up at each call, so a test harness can step it process-wide


# Given this clock's reading, the latest time the cluster agrees has been reached, or
# None where nothing bounds it (a follower does not stamp proposals).
Ceiling = Callable[[float], Optional[float]]


class LeaderClock:
    def __init__(self, wall: Callable[[], float] = _system_wall,
                 monotonic: Callable[[], float] = time.monotonic, ceiling: Ceiling | None = None) -> None:
        self._wall, self._monotonic, self._ceiling = wall, monotonic, ceiling
        self.ahead_by = 0.0  # how far this clock is ahead of its ceiling while held to it; 0 otherwise
        self._last_monotonic = monotonic()
        self._offset = wall() - self._last_monotonic  # wall = monotonic + offset while believed
        self.stepped_by = 0.0  # how far the wall clock is from ours while it has stepped; 0 when in line

    def monotonic(self) -> float:
        """Seconds on a clock no operator can set: for leases and other local timeouts."""
        return self._monotonic()

    def now(self) -> float:
        """Seconds since the epoch, as the wall clock would say had it never stepped,
        and never further ahead than the ceiling allows."""
        own = self._stepless()
        ceiling = self._ceiling(own) if self._ceiling is not None else None
        ahead = own - ceiling if ceiling is not None else 0.0
        if ahead <= TOLERANCE_S:
            if self.ahead_by:
                log.warning("this node's clock is back in line with its voters' clocks; using it again")
            self.ahead_by = 0.0
            return own
        if not self.ahead_by:
            log.warning("this node's clock is %.3fs ahead of the time a majority of the voters' clocks have "
                        "reached; proposals are stamped with theirs (check this node's clock)", ahead)
        self.ahead_by = ahead
        return ceiling + TOLERANCE_S

    def _stepless(self) -> float:
        wall, mono = self._wall(), self._monotonic()
        expected = mono + self._offset
        tolerance = TOLERANCE_S + SLEW_PER_S * max(0.0, mono - self._last_monotonic)
        self._last_monotonic = mono
        if abs(wall - expected) <= tolerance:
            if self.stepped_by:
                log.warning("system clock back in line with the monotonic clock; using it again")
            self.stepped_by = 0.0
            self._offset = wall - mono
            return wall
        if not self.stepped_by:
            log.warning("system clock stepped by %+.3fs; ignoring the step (proposals, epochs and the dedupe "
                        "window keep the monotonic clock's time) until it comes back", wall - expected)
        self.stepped_by = wall - expected
        return expected

    def catch_up(self, replicated: float) -> None:
        """Never run behind the time the log already holds (set by earlier leaders):
        a new leader whose clock is behind would otherwise stall epochs and the dedupe window."""
        behind = replicated - self.now()
        if behind > TOLERANCE_S:
            log.warning("this node's clock is %.3fs behind the replicated clock; moving forward to it", behind)
            self._offset += behind
            self.stepped_by = -behind
