"""Real clusters for the chaos tests: nodes may run with a planted bug."""
from __future__ import annotations

from pathlib import Path

from chaos import planted
from coordinator.cli.local_cluster import LocalCluster, NodeProcess
from tests.support.cluster import FAST


class PlantedCluster(LocalCluster):
    """A LocalCluster whose nodes start through `python -m chaos.planted --bug BUG` (no bug: as usual)."""

    def __init__(self, root: Path, bug: str | None, size: int = 3, **kwargs: object) -> None:
        super().__init__(root, size, settings=FAST, **kwargs)  # type: ignore[arg-type]
        self.bug = bug

    def command(self, node: NodeProcess, members: list[int] | None = None) -> list[str]:
        args = super().command(node, members)
        return args if self.bug is None else planted.program(self.bug) + args[args.index("coordinator"):]
