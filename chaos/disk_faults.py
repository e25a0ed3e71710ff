"""Faults of the nodes' disks: full, slow, and the mounts they need.

A node's data directory goes on its own loop disk (chaos.disk.LoopDisk, which needs
root and a private mount namespace), so a fault reaches one node's storage and
nothing else. A power cut is a fault of the whole machine, processes included:
ChaosCluster.power_cut() drives it through get().
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, Sequence

from chaos.history import NemesisRecord
from coordinator.harness.local_cluster import NodeProcess


class Disk(Protocol):
    """What the controller needs of a chaos.disk.LoopDisk (created and mounted by us)."""

    mountpoint: Path

    def create(self) -> None: ...
    def mount(self) -> None: ...
    def unmount(self) -> None: ...
    def fill(self, leave_bytes: int) -> None: ...
    def unfill(self) -> None: ...
    def power_cut(self) -> None: ...
    def power_cycle(self) -> None: ...
    def throttle(self, pids: list[int], write_bps: int, write_iops: int) -> None: ...
    def unthrottle(self, pids: list[int]) -> None: ...
    def close(self) -> None: ...


class NoDisks(RuntimeError):
    """A disk fault was asked of a cluster started without `disks=`."""


class DiskFaults:
    def __init__(self, factory: Callable[[int], Disk] | None, nodes: Sequence[NodeProcess],
                 record: NemesisRecord) -> None:
        """`factory(i)`: node i's disk; None runs the nodes on plain directories, and
        every disk fault then raises NoDisks."""
        self._factory, self._nodes, self._record = factory, nodes, record
        self._disks: dict[int, Disk] = {}

    def mount_all(self) -> None:
        """Create and mount every node's disk and put its data directory there (before
        the nodes first start)."""
        if self._factory is None:
            return
        for node in self._nodes:
            disk = self._factory(node.index)
            disk.create()
            disk.mount()
            self._disks[node.index] = disk
            node.data_dir = Path(disk.mountpoint) / "data"

    def mounted(self, i: int) -> bool:
        """Whether node i's data directory is a mount point (which cannot be removed)."""
        return i in self._disks

    def get(self, i: int) -> Disk:
        if not self._disks:
            raise NoDisks("this cluster runs without disks: pass disks= to ChaosCluster (needs root "
                          "and a private mount namespace; see chaos.disk.unavailable_reason())")
        return self._disks[i]

    def fill(self, i: int, leave_bytes: int = 0) -> None:
        """Fill node i's disk until `leave_bytes` remain free."""
        self.get(i).fill(leave_bytes)
        self._record("disk-fill", {"node": i, "leave_bytes": leave_bytes})

    def unfill(self, i: int) -> None:
        self.get(i).unfill()
        self._record("disk-unfill", {"node": i})

    def slow(self, i: int, write_bps: int = 1 << 20, write_iops: int = 50) -> None:
        """Throttle node i's current process's writes (a restart starts it unthrottled)."""
        disk, node = self.get(i), self._nodes[i]
        if not node.alive:
            raise RuntimeError(f"node {i} is not running")
        disk.throttle([node.process.pid], write_bps, write_iops)
        self._record("disk-slow", {"node": i, "write_bps": write_bps, "write_iops": write_iops})

    def fast(self, i: int) -> None:
        disk, node = self.get(i), self._nodes[i]
        if node.alive:
            disk.unthrottle([node.process.pid])
        self._record("disk-fast", {"node": i})

    def close(self) -> None:
        """Unmount and release every disk (the nodes are stopped first)."""
        for disk in self._disks.values():
            try:
                disk.unmount()
            finally:
                disk.close()
        self._disks.clear()


__all__ = ["Disk", "DiskFaults", "NoDisks"]
