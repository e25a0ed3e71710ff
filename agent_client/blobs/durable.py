"""Crash-safe file primitives shared by the blob store and the agent-side logs.

POSIX gives atomicity only for rename and durability only after fsync of both the
file and its directory; skipping either can leave a zero-length or partial file under
its final name after a power loss. Every durable write here goes through these.
"""
from __future__ import annotations

from pathlib import Path

from coordinator import fsutil
from coordinator.fsutil import TMP_PREFIX

__all__ = ["TMP_PREFIX", "append_durably", "atomic_write", "ensure_dir"]


def ensure_dir(path: Path) -> None:
    """mkdir -p whose new entries are durable too: a renamed-and-fsynced file is lost
    after a power cut if the directory holding it was never recorded in its parent."""
    if path.is_dir():
        return
    ensure_dir(path.parent)
    path.mkdir(exist_ok=True)  # a concurrent writer may win the race: sync the entry anyway
    fsutil.fsync_dir(path.parent)


def atomic_write(path: Path, data: bytes) -> None:
    """Write temp + fsync + rename + fsync(dir): readers see the old file or the whole new one."""
    ensure_dir(path.parent)
    fsutil.atomic_write(path, data)


def append_durably(path: Path, data: bytes) -> None:
    """Append and fsync; a crash can only leave a torn *last* record, which readers drop."""
    ensure_dir(path.parent)
    new = not path.exists()
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        fsutil.fsync_file(f.fileno())
    if new:
        fsutil.fsync_dir(path.parent)
