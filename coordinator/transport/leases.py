"""What the servicers need from the leader's lease table, so that the transport
does not depend on the service layer that keeps it (coordinator.service.leases)."""
from __future__ import annotations

from typing import Protocol

from coordinator.core.decisions import Lease
from coordinator.core.model import Group


class Leases(Protocol):
    def renew(self, group: Group, agent_id: str, incarnation: int) -> Lease:
        """A fresh lease for this incarnation: it registered, or it heartbeats."""

    def hold(self, group: str, agent_id: str, incarnation: int) -> None:
        """An open session speaks for this incarnation, proved live now: its lease does
        not run out until the session ends (one release per hold), as long as its frames
        keep proving it (core.decisions.HOLD_PROOF_TTLS)."""

    def prove(self, group: str, agent_id: str, incarnation: int) -> None:
        """A frame on a session that holds this incarnation proved it live again."""

    def release(self, group: str, agent_id: str, incarnation: int) -> None:
        """A session that held this incarnation's lease ended: the lease runs a whole TTL from now."""

    def forget(self, group: str, agent_id: str) -> None:
        """No lease any more: the agent left, so its silence is no failure."""
