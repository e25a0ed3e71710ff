"""How raftpoint opens an LMDB environment, and what it checks before reading one.

Shared by the store (lmdb_store) and the child process that reads a store through
before the node opens it (lmdb_check), so neither imports the other.

`lib_version=0` pins the LMDB 0.9 on-disk format (py-lmdb 3.0.0 bundles 0.9 and
1.0 engines), so an upgrade of the wheel can never silently change it.
"""
from __future__ import annotations

from pathlib import Path

import lmdb

from coordinator.storage.protocol import DamagedAtRest, ImageError

DATA_FILE = "data.mdb"


class StoreDamaged(DamagedAtRest):
    """data.mdb is truncated or unreadable: the node must not open it."""


def open_env(path: Path, **options: object) -> lmdb.Environment:
    """Every environment (live, an image being checked, the checking child's) is opened
    the same way. Callers look it up on this module at call time (`lmdb_env.open_env`).

    Chaos seam: the planted bug `skip-fsync` (chaos/planted.py) replaces it with one
    that opens without sync and metasync."""
    return lmdb.open(str(path), lib_version=0, subdir=True, max_dbs=2, readahead=False, **options)


def check_size(directory: Path, env: lmdb.Environment) -> None:
    """Raise ImageError if data.mdb is shorter than the pages its meta page counts.
    Runs before any page is touched: reading past the end of an mmap is a SIGBUS.
    (LMDB reads the meta pages with read(), not through the map.)"""
    size = (directory / DATA_FILE).stat().st_size
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if size < needed:
        raise ImageError(f"truncated LMDB file: {size} bytes, its meta page counts {needed}")
