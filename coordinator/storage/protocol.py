"""The store protocol the replicated state machine writes through.

Deliberately tiny: ordered byte keys, one atomic commit per batch of applied log
entries (carrying the applied index with it, so "which entries are in the store"
can never disagree with "what the store holds"), and a self-contained image for
Raft snapshots. Everything typed lives above it (storage/state.py).

`check_commit` is shared by every implementation so that both refuse exactly the
same arguments, and refuse them *before* touching anything: a batch is never
half applied because its tenth key was malformed.
"""
from __future__ import annotations

import os
from typing import BinaryIO, Mapping, Protocol

from coordinator.storage.digest import check_monotonic

# LMDB's compiled-in key limit (mdb_env_get_maxkeysize). The memory store enforces
# it too, so a state machine tested against memory cannot produce keys LMDB refuses.
MAX_KEY_SIZE = 511
_MAX_INDEX = (1 << 64) - 1  # stored as 8-byte big-endian


class StoreError(Exception):
    """Base of every error a store raises on purpose."""


class StoreFullError(StoreError):
    """A commit did not fit even after growing the store; nothing was written.

    The message says how full the store is and which setting to raise."""


class StoreIOError(StoreError):
    """The disk failed a commit (no space left, I/O error); nothing was written."""


class DamagedAtRest(Exception):
    """A node's stored data (store, journal or snapshot) changed on disk since it was
    written: a bad disk or a hand edit, not a crash. Nothing was changed or served;
    the node must not start on it (exit code EXIT_DAMAGED) and is rebuilt from its peers."""


EXIT_DAMAGED = 65  # EX_DATAERR
# What a node's data dir holds: the Raft journal, its term/vote file, the snapshot, the store.
JOURNAL_FILE, TERM_FILE, SNAPSHOT_FILE, STORE_DIR = "raft.journal", "raft.journal.term", "raft.snapshot", "state"
# The one documented repair, named in every DamagedAtRest message: the peers hold
# every committed entry, and the term file keeps the node from voting twice in a term.
REBUILT_FROM_PEERS = (JOURNAL_FILE, SNAPSHOT_FILE, STORE_DIR)
REBUILD_FROM_PEERS = (f"Rebuild this node from its peers: with it stopped, run `raftpoint repair --from-peers "
                      f"--data-dir DIR` (it moves {', '.join(REBUILT_FROM_PEERS)} aside and keeps {TERM_FILE}: "
                      f"the term and vote) and start it again")


class OldFormat(Exception):
    """A data dir file of an older, unauthenticated format (a journal before the MAC,
    pysyncobj's own journal, a snapshot of version 1). A node never reads one: whoever
    could write the file could have planted a pickled callable in it. The explicit,
    one-off `raftpoint migrate` converts it; nothing was changed."""

    @classmethod
    def of(cls, path: str | os.PathLike[str], what: str) -> "OldFormat":
        return cls(f"{path} is {what}, which carries no MAC and is not read at start: with the node stopped, run "
                   f"`raftpoint migrate --data-dir {os.path.dirname(path) or '.'}` once, with the node's Raft "
                   "password, then start it")


class ImageError(StoreError, ValueError):
    """A store image is truncated, corrupt or of another format; the store is unchanged."""


class Store(Protocol):
    @property
    def applied_index(self) -> int:
        """Index of the last Raft entry whose writes are in the store; 0 when new."""

    def get(self, key: bytes) -> bytes | None: ...

    def scan(self, prefix: bytes, start: bytes | None = None,
             limit: int | None = None) -> list[tuple[bytes, bytes]]:
        """Pairs whose key starts with `prefix`, sorted by key bytes, from the first
        key >= `start` (if given), at most `limit` of them (if given)."""

    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        """Apply all writes (None deletes) and set applied_index, atomically and
        durably. ValueError (store unchanged) if applied_index < the current one."""

    def digest(self, skip: bytes | None = None) -> str:
        """Hex SHA-256 over the length-prefixed (key, value) pairs in key order,
        excluding applied_index: equal on replicas with equal content whatever
        their history. Extension: keys starting with `skip` are left out."""

    def digest_with_index(self, skip: bytes | None = None) -> tuple[int, str]:
        """(applied_index, digest(skip)) read from one state: a status sample taken
        while the store commits must never pair one commit's index with another's
        content, or replicas that agree would look divergent (and vice versa)."""

    def write_image(self, fileobj: BinaryIO) -> int:
        """Write a self-contained image (data + applied_index) at the file's
        current position; returns its length in bytes."""

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        """Replace the whole content (and applied_index) with the `length`-byte
        image at the file's position. ImageError (store unchanged) if invalid."""

    def stats(self) -> dict[str, int]:
        """At least entries, used_bytes, capacity_bytes (0 = unbounded)."""

    def close(self) -> None: ...


def check_commit(current: int, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
    """Raise (TypeError/ValueError) unless the whole commit is acceptable."""
    if isinstance(applied_index, bool) or not isinstance(applied_index, int):
        raise TypeError(f"applied_index must be an int, got {type(applied_index).__name__}")
    if not 0 <= applied_index <= _MAX_INDEX:
        raise ValueError(f"applied_index out of range: {applied_index}")
    check_monotonic(current, applied_index)
    for key, value in writes.items():
        if not isinstance(key, bytes):
            raise TypeError(f"store keys are bytes, got {type(key).__name__}")
        if not 0 < len(key) <= MAX_KEY_SIZE:
            raise ValueError(f"store keys are 1..{MAX_KEY_SIZE} bytes, got {len(key)}")
        if value is not None and not isinstance(value, bytes):
            raise TypeError(f"store values are bytes or None, got {type(value).__name__}")


def check_scan(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"scan limit must be >= 0, got {limit}")


def scan_from(prefix: bytes, start: bytes | None) -> bytes:
    """Where a scan begins: the later of the prefix itself and `start`."""
    return prefix if start is None or start < prefix else start
