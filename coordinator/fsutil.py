"""File-system durability helpers shared by the coordinator and agent_client.

Every fsync of the Raft journal, its term/vote file and the snapshot goes through
this module, and callers look the functions up on the module at call time
(`fsutil.fsync_file(fd)`, not a from-import): that is what lets a fault-injection
run replace them in one place to show what a node that skips fsync would lose.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

TMP_PREFIX = ".tmp-"


def fsync_file(fd: int, *, data_only: bool = False) -> None:
    """Flush an open file to stable storage. `data_only` (fdatasync) skips metadata
    that reading the data does not need (times), but still covers a changed size."""
    if data_only:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def fsync_dir(path: str | Path) -> None:
    """Renames and creations in `path` are durable only once the directory is fsynced."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync_file(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """mkdir -p whose new entries are durable too: a renamed-and-fsynced file is lost
    after a power cut if the directory holding it was never recorded in its parent."""
    if path.is_dir():
        return
    ensure_dir(path.parent)
    path.mkdir(exist_ok=True)  # a concurrent writer may win the race: sync the entry anyway
    fsync_dir(path.parent)


def atomic_write(path: Path, data: bytes) -> None:
    """Write temp + fsync + rename + fsync(dir): readers see the old file or the whole
    new one, and after it returns the new one survives a power loss."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            fsync_file(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
