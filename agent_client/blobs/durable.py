"""Crash-safe file primitives shared by the blob store and the agent-side logs.

POSIX gives atomicity only for rename and durability only after fsync of both the
file and its directory; skipping either can leave a zero-length or partial file under
its final name after a power loss. Every durable write here goes through these.
"""
from __future__ import annotations

from pathlib import Path

from coordinator import fsutil
from coordinator.fsutil import TMP_PREFIX, create_exclusive, ensure_dir, sync_files

__all__ = ["TMP_PREFIX", "atomic_write", "create_exclusive", "ensure_dir", "sync_files"]


def atomic_write(path: Path, data: bytes | bytearray | memoryview, *, durable: bool = True) -> None:
    """Write temp + fsync + rename + fsync(dir): readers see the old file or the whole new
    one (`durable=False`: no fsyncs)."""
    ensure_dir(path.parent)
    fsutil.atomic_write(path, data, durable=durable)
