"""Storage: a store protocol with memory and LMDB implementations.

open_store imports LMDB lazily so users of the memory store (agent_client.testing)
never load it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.storage.protocol import ImageError, Store, StoreError, StoreFullError, StoreIOError

KINDS = ("memory", "lmdb")


def open_store(kind: str, path: str | Path | None, **options: Any) -> Store:
    if kind == "memory":
        from coordinator.storage.memory import MemoryStore

        return MemoryStore()
    if kind == "lmdb":
        if path is None:
            raise ValueError("the lmdb store needs a path")
        from coordinator.storage.lmdb_store import LmdbStore

        return LmdbStore(path, **options)
    raise ValueError(f"unknown store kind {kind!r}; valid kinds: {', '.join(KINDS)}")


__all__ = ["KINDS", "ImageError", "Store", "StoreError", "StoreFullError", "StoreIOError", "open_store"]
