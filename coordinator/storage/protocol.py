"""The store protocol the replicated state machine writes through.

Deliberately tiny: ordered byte keys, one atomic commit per batch of applied log
entries (carrying the applied index with it), and a self-contained image for Raft
snapshots. Everything typed lives above it (storage/state.py).
"""
from __future__ import annotations

from typing import BinaryIO, Mapping, Protocol


class StoreError(Exception):
    pass


class StoreFullError(StoreError):
    """A commit did not fit even after growing the store; nothing was written."""


class Store(Protocol):
    @property
    def applied_index(self) -> int: ...

    def get(self, key: bytes) -> bytes | None: ...

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]: ...

    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        """Apply all writes (None deletes) and set applied_index atomically and durably."""

    def digest(self, skip: bytes | None = None) -> str:
        """SHA-256 over the data in key order (keys starting with `skip` left out),
        excluding applied_index: equal on replicas with equal content."""

    def write_image(self, fileobj: BinaryIO) -> int:
        """Write a self-contained image at the file's position; returns its length."""

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        """Replace the whole content with an image read from the file's position."""

    def stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...
