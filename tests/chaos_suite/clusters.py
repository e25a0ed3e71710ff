"""Real clusters for the chaos tests: nodes may run with a planted bug."""
from __future__ import annotations

from pathlib import Path

from chaos import node as chaos_node
from coordinator.harness.local_cluster import LocalCluster
from tests.support.cluster import FAST


def planted_cluster(root: Path, bug: str | None, size: int = 3) -> LocalCluster:
    """Nodes started through `python -m chaos.node --bug BUG` (no bug: as usual)."""
    return LocalCluster(root, size, settings=FAST, program=(lambda i: chaos_node.program({}, bug)) if bug else None)
