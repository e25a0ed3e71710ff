"""What the servicers need from the leader's lease table, so that the transport
does not depend on the service layer that keeps it (coordinator.service.leases)."""
from __future__ import annotations

from typing import Protocol

from coordinator.core.decisions import Lease
from coordinator.core.model import Group


class Leases(Protocol):
    def renew(self, group: Group, agent_id: str, incarnation: int) -> Lease:
        """A fresh lease for this incarnation: it registered, or it heartbeats."""

    def forget(self, group: str, agent_id: str) -> None:
        """No lease any more: the agent left, so its silence is no failure."""
