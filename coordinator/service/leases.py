"""Agent leases, kept in the leader's memory only (never in the log).

Heartbeats are frequent and their loss is harmless: a new leader grants every
live agent a fresh lease on takeover, then expiries are proposed as failures.
Leases run on the leader's monotonic clock, from its own takeover: no wall-clock
step, on this node or any other, can expire or prolong one.
"""
from __future__ import annotations

from typing import Callable, Iterable

from coordinator.core.commands import DeclareAgentFailed
from coordinator.core.decisions import Lease, expired_leases, extend, forget, renew
from coordinator.core.model import Agent, AgentState, Group
from coordinator.replication.leader_clock import LeaderClock


class LeaseTable:
    """Satisfies coordinator.transport.leases.Leases, through which the servicers renew and forget."""

    def __init__(self, monotonic: Callable[[], float] | None = None) -> None:
        self._monotonic = monotonic or LeaderClock().monotonic
        self.leases: dict[tuple[str, str], Lease] = {}
        self.term_granted: int | None = None

    def renew(self, group: Group, agent_id: str, incarnation: int) -> Lease:
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

    def forget(self, group: str, agent_id: str) -> None:
        forget(self.leases, [(group, agent_id)])

    def credit(self, seconds: float) -> None:
        """Every lease `seconds` longer: a window the leader was too late to hear keepalives in."""
        extend(self.leases, seconds)

    def expired(self) -> list[DeclareAgentFailed]:
        due = expired_leases(self.leases, self._monotonic())
        forget(self.leases, [(d.group, d.agent_id) for d in due])
        return due
