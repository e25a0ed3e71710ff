"""The boot-skew fault: a node restarted with its wall clock far ahead, then made leader.

A running node ignores steps of its wall clock (coordinator.replication.leader_clock),
but a node *started* with a wrong clock has no earlier reading to compare with: its
voters' clocks are the reference (coordinator.replication.voter_clocks). Were they
not, its first proposal as leader would push the replicated dedupe clock that far
ahead, and every write stamped with a client's real time would be refused as too old
for good, on every node: the no-refusals-for-time invariant says so.

Injection: the target (a follower) is killed, its clock file set SKEW_S ahead (the
process reads it from its first look at the clock: chaos.node), and it is started.
Then it is made leader without luck: the leader L is paused, and the two others
elect one. If the other follower F wins, F commits past what L had committed (only
the skewed node's acknowledgement can make that a majority's), F is paused and L
resumed: L's log now lacks an entry of F's term that the skewed node holds, so L
cannot win and the skewed node must (a few rounds at most: ROUNDS). Paused nodes are resumed at once after, and the
skewed node is left to lead for IN_FORCE_S while the workload writes through it.
Healing puts the clock right and restarts the node, so it boots in line. The history
gets one op (LED) saying whether the skewed node led, and for how long.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from chaos.controller import ChaosCluster
from chaos.history import History

LED = "boot-skew-led"  # nemesis op: {"node", "led": bool, "leader", "led_s": seconds it led}
SKEW_S = 365 * 86400.0  # a year: an RTC reset or a VM restored with a wrong date
ELECTION_WAIT_S = 15.0  # a loaded 2-core machine can take several election timeouts
# Rounds of _lead_with at most: one is enough unless the first leader committed more
# between its status read and its pause (the second then commits past it without an
# entry of its own term on the skewed node, and the first can win again).
ROUNDS = 3
IN_FORCE_S = 3.0  # the skewed node leads this long at least, whatever the plan's hold left
POLL_S = 0.1


@dataclass
class BootSkewFault:
    """One boot-skew fault on a running cluster: inject(), then heal() (module doc)."""

    cluster: ChaosCluster
    history: History
    node: int
    stop: threading.Event

    def inject(self) -> None:
        c, i = self.cluster, self.node
        c.kill(i)
        c.step_clock(i, SKEW_S)
        c.start(i)
        leader = self._leader(range(c.size))
        for _ in range(ROUNDS):
            if leader is None or leader == i:
                break
            leader = self._lead_with(leader)
        led_s = self._leading_for(IN_FORCE_S) if leader == i else 0.0
        self.history.nemesis(LED, {"node": i, "led": leader == i, "leader": leader, "led_s": round(led_s, 2)})

    def heal(self) -> None:
        c, i = self.cluster, self.node
        c.step_clock(i, 0.0)
        c.restart(i, crash=False)

    def _lead_with(self, first: int) -> int | None:
        """The leader once the skewed node was made one (module doc)."""
        c, i = self.cluster, self.node
        before = c.statuses().get(first)
        term, commit = (before.term, before.commit_index) if before is not None else (0, 0)
        c.pause(first)
        try:
            second = self._leader((j for j in range(c.size) if j != first), term)
            if second is None or second == i or not self._committed_past(second, commit):
                return second
            term = c.leaders().get(second, term)
            c.pause(second)
            c.resume(first)
            try:
                return self._leader((j for j in range(c.size) if j != second), term)
            finally:
                c.resume(second)
        finally:
            if first in c.paused:
                c.resume(first)

    def _committed_past(self, leader: int, index: int) -> bool:
        """Whether `leader` committed an entry past `index` (see _lead_with)."""
        return self._until(lambda: any(s.role == "leader" and s.commit_index > index
                                       for n, s in self.cluster.statuses().items() if n == leader),
                           ELECTION_WAIT_S)

    def _leading_for(self, seconds: float) -> float:
        """Wait while the skewed node leads, `seconds` at most; how long it led."""
        start = time.monotonic()
        self._until(lambda: self.node not in self.cluster.leaders(), seconds)
        return time.monotonic() - start

    def _leader(self, among: Iterable[int], above_term: int = 0) -> int | None:
        """The node of `among` that leads at the highest term above `above_term` (a
        deposed leader believes it leads until it hears of a newer term), or None."""
        allowed, found = set(among), []

        def claim() -> bool:
            claims = {n: t for n, t in self.cluster.leaders().items() if n in allowed and t > above_term}
            if claims:
                found.append(max(claims, key=claims.__getitem__))
            return bool(claims)
        return found[0] if self._until(claim, ELECTION_WAIT_S) else None

    def _until(self, done: Callable[[], bool], seconds: float) -> bool:
        """Poll `done()` until it is true (True), or for `seconds` or until the run stops (False)."""
        end = time.monotonic() + seconds
        while not self.stop.is_set():
            if done():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(POLL_S)
        return False
