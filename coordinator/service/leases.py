"""Agent leases, kept in the leader's memory only (never in the log).

Heartbeats are frequent and their loss is harmless: a new leader grants every
live agent a fresh lease on takeover, then expiries are proposed as failures.
An agent's open session holds its lease (core.decisions.expired_leases): while
the session lives, the lease does not run out, and when it ends the agent has a
whole TTL to come back.
Leases run on the leader's monotonic clock, from its own takeover: no wall-clock
step, on this node or any other, can expire or prolong one.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from coordinator.core.commands import DeclareAgentFailed
from coordinator.core.decisions import Lease, expired_leases, extend, forget, release_hold, renew
from coordinator.core.model import Agent, AgentState, Group
from coordinator.replication.leader_clock import LeaderClock


class LeaseTable:
    """Satisfies coordinator.transport.leases.Leases, through which the servicers renew and forget."""

    def __init__(self, monotonic: Callable[[], float] | None = None) -> None:
        self._monotonic = monotonic or LeaderClock().monotonic
        self.leases: dict[tuple[str, str], Lease] = {}
        # Per lease key, each incarnation open sessions hold and when a frame last proved
        # it (core.decisions.Holds), and how many sessions hold each (usually one; a
        # client's new session can open before its broken one has ended).
        self.holds: dict[tuple[str, str], dict[int, float]] = {}
        self._sessions: dict[tuple[str, str], Counter[int]] = {}
        self.term_granted: int | None = None

    def renew(self, group: Group, agent_id: str, incarnation: int) -> Lease:
        """A whole TTL from now. Chaos seam: `short-lease` (chaos/planted.py) grants a fraction of it."""
        return renew(self.leases, group, agent_id, incarnation, self._monotonic())

    def grant_all(self, term: int, groups: list[Group], agents_of: Callable[[str], Iterable[Agent]]) -> None:
        """On becoming leader: a fresh lease for every live agent, so none is declared
        failed merely because the previous leader held its heartbeats."""
        self.leases.clear()
        for group in groups:
            for agent in agents_of(group.spec.name):
                if agent.state is AgentState.ALIVE:
                    self.renew(group, agent.agent_id, agent.incarnation)
        self.term_granted = term

    def hold(self, group: str, agent_id: str, incarnation: int) -> None:
        """An open session holds this incarnation's lease until it ends.

        Chaos seam: `short-lease` (chaos/planted.py) replaces it with one that holds nothing."""
        self._sessions.setdefault((group, agent_id), Counter())[incarnation] += 1
        self.prove(group, agent_id, incarnation)

    def prove(self, group: str, agent_id: str, incarnation: int) -> None:
        key = (group, agent_id)
        if self._sessions.get(key, {}).get(incarnation, 0) > 0:
            self.holds.setdefault(key, {})[incarnation] = self._monotonic()

    def release(self, group: str, agent_id: str, incarnation: int) -> None:
        key = (group, agent_id)
        sessions = self._sessions.get(key)
        if sessions is None or sessions[incarnation] <= 0:
            return
        sessions[incarnation] -= 1
        if sessions[incarnation] > 0:
            return
        del sessions[incarnation]
        held = self.holds.get(key, {})
        held.pop(incarnation, None)
        if not sessions:
            del self._sessions[key]
        if not held:
            self.holds.pop(key, None)
        release_hold(self.leases, key, incarnation, self._monotonic())

    def forget(self, group: str, agent_id: str) -> None:
        """The agent left: no lease, and none of its sessions holds one for it any more
        (their later releases change nothing)."""
        forget(self.leases, [(group, agent_id)])
        self.holds.pop((group, agent_id), None)
        self._sessions.pop((group, agent_id), None)

    def credit(self, seconds: float) -> None:
        """Every lease `seconds` longer: a window the leader was too late to hear keepalives in."""
        extend(self.leases, seconds)

    def live_by_lease(self) -> dict[str, int]:
        """Agents holding a lease, by what keeps it: an open session, or keepalive calls alone."""
        in_session = sum(1 for key in self.holds if key in self.leases)
        return {"session": in_session, "keepalive": len(self.leases) - in_session}

    def expired(self) -> list[DeclareAgentFailed]:
        due = expired_leases(self.leases, self._monotonic(), self.holds)
        forget(self.leases, [(d.group, d.agent_id) for d in due])
        return due
