"""File-system durability helpers shared by the coordinator and agent_client."""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | Path) -> None:
    """Renames and creations in `path` are durable only once the directory is fsynced."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
