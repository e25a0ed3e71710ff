"""Real clusters for the chaos tests: nodes may run with a planted bug."""
from __future__ import annotations

from pathlib import Path

from chaos import node as chaos_node
from coordinator.harness.local_cluster import LocalCluster
from tests.support.cluster import FAST
from tests.support.tls import clients_trust


class TrustedCluster(LocalCluster):
    """A LocalCluster whose `with` block also sets this process's client TLS variables
    to its CA (tests.support.tls.clients_trust): the workloads connect without settings."""

    def __enter__(self) -> "TrustedCluster":
        self._trust = clients_trust(self)
        self._trust.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._trust.__exit__(None, None, None)


def planted_cluster(root: Path, bug: str | None, size: int = 3) -> LocalCluster:
    """Nodes started through `python -m chaos.node --bug BUG` (no bug: as usual)."""
    return TrustedCluster(root, size, settings=FAST, program=(lambda i: chaos_node.program({}, bug)) if bug else None)
