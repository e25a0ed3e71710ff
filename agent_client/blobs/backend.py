"""Where chunk and manifest bytes live, behind a small key/value interface.

The store above only needs create/get/delete/list on opaque keys plus a way to name a
key as a URI, so an object store (S3, see s3.py) replaces the directory without
touching chunking, encryption or verification. Keys look like
"packs/plain/<id>.pack", "manifests/<sha>.json" and, in older stores, "chunks/plain/ab/abcd...".
"""
from __future__ import annotations

import errno
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Protocol
from urllib.parse import unquote, urlparse

from agent_client.blobs.durable import TMP_PREFIX, atomic_write, create_exclusive, ensure_dir, sync_files
from agent_client.blobs.errors import BlobMissing
from coordinator.fsutil import Buffer

__all__ = ["Buffer", "ChunkBackend", "DirectoryBackend", "StoredObject", "file_url_path"]

# A pack's writeback starts every this many bytes written, while later chunks are still
# hashed, so flush() waits for its tail rather than for the whole pack (64 MiB: the
# sync after writing fell from ~25 ms to ~2 ms on an SSD).
WRITE_BEHIND = 4 * 1024 * 1024


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: float  # seconds since the epoch: GC spares objects younger than its grace period


class ChunkBackend(Protocol):
    location: str  # names the store in errors (never holds credentials)

    def put(self, key: str, data: Buffer) -> None:
        """Store atomically, replacing any object under `key`: after return the key reads
        back whole, never partial; durable after flush(). Called from several threads at once."""

    def create(self, key: str, data: Buffer | Iterable[Buffer]) -> bool:
        """Like put, but never replaces: False (and nothing written) if `key` exists.
        Content-addressed keys make an existing object *probably* the same bytes; the
        caller verifies it rather than trusting the name. Several buffers (a list, or an
        iterator consumed once, as the caller produces them) are stored back to back as
        one object (a pack of chunks)."""

    def flush(self) -> None:
        """Every put/create that returned is durable once this returns (the store calls it
        after a checkpoint's chunks and again after its manifest, so no durable manifest
        ever names a chunk a power loss could take)."""

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        """The bytes; raises BlobMissing naming the key if absent. With `max_bytes`, at
        most max_bytes + 1 of them: a longer object is cut there, so the caller sees it
        is too long without reading it whole."""

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """At most `length` bytes from `start` (fewer if the object is shorter); raises
        BlobMissing naming the key if absent."""

    def exists(self, key: str) -> bool: ...

    def size(self, key: str) -> int:
        """Stored length (for GC accounting) without reading the bytes."""

    def delete(self, key: str) -> None:
        """Idempotent."""

    def keys(self, prefix: str) -> Iterator[str]:
        """Every stored key under prefix (not in-progress temporaries)."""

    def entries(self, prefix: str) -> Iterator[StoredObject]:
        """keys() with size and age, in one listing (one request per 1000 keys on S3)."""

    def uri(self, key: str) -> str:
        """The URI registered with the coordinator for a manifest key."""

    def key_for_uri(self, uri: str) -> str | None:
        """The inverse of uri(), or None if the URI is not of this backend."""


class DirectoryBackend:
    """A local (or mounted) directory; file:// URIs.

    New files are linked into place without a sync, and flush() syncs them all at once
    (fsutil.sync_files: the fdatasyncs in flight together, and one fsync per
    directory). One flush runs at a time: a flush that finds its files taken by the one
    in progress returns only once that one has synced them, and the files created
    meanwhile go out together in the next. Syncing the whole file system (syncfs)
    instead waits for every other process's dirty data too: seconds at p99 on a busy
    machine.

    A failed sync fails every later flush of this backend: after a failed fsync the
    kernel may have dropped the dirty pages and marked them clean, so syncing the
    same files again can succeed with their bytes lost, and any put that created or
    reused one of them before the failure (its own, or another's it deduplicated
    against) would be acknowledged on bytes that are gone. Only a new process, which
    reads back what is on disk, can trust the store again."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.location = str(self.root)
        self._unsynced: list[Path] = []
        self._unsynced_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._sync_failed: BaseException | None = None  # the first failed sync: every later flush fails
        self._sync_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="blob-sync")
        weakref.finalize(self, self._sync_pool.shutdown, wait=False)

    def _path(self, key: str) -> Path:
        # Checked by syntax, not resolve(): a resolve per chunk (an lstat per path
        # component) was a third of a large checkpoint's time.
        parts = key.split("/")
        if key.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\0" in key:
            raise ValueError(f"key {key!r} escapes the blob root")
        return self.root.joinpath(*parts)

    def put(self, key: str, data: Buffer) -> None:
        atomic_write(self._path(key), data)

    def flush(self) -> None:
        with self._flush_lock:
            if self._sync_failed is not None:
                raise OSError(errno.EIO, f"an earlier sync of the blob store at {self.location} failed "
                              f"({self._sync_failed}); files written before it may be lost: restart the "
                              "process once the disk is fixed") from self._sync_failed
            with self._unsynced_lock:
                files, self._unsynced = self._unsynced, []
            try:
                sync_files(files, self._sync_pool)
            except Exception as e:
                self._sync_failed = e
                raise

    def create(self, key: str, data: Buffer | Iterable[Buffer]) -> bool:
        path = self._path(key)
        try:
            created = create_exclusive(path, data, durable=False, write_behind=WRITE_BEHIND)
        except FileNotFoundError:  # first object under this fan-out directory
            ensure_dir(path.parent)
            created = create_exclusive(path, data, durable=False, write_behind=WRITE_BEHIND)
        if created:
            with self._unsynced_lock:
                self._unsynced.append(path)
        return created

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        try:
            with self._path(key).open("rb") as f:
                return f.read() if max_bytes is None else f.read(max_bytes + 1)
        except FileNotFoundError:
            raise BlobMissing(f"{self.uri(key)} is missing") from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise BlobMissing(f"{self.uri(key)} is missing") from None
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        return self._path(key).stat().st_size

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> Iterator[str]:
        return (entry.key for entry in self.entries(prefix))

    def entries(self, prefix: str) -> Iterator[StoredObject]:
        base = self.root / prefix
        if base.is_dir():
            for path in base.rglob("*"):
                if not path.name.startswith(TMP_PREFIX):
                    try:
                        st = path.stat()
                    except FileNotFoundError:  # deleted while listing
                        continue
                    if path.is_file():
                        yield StoredObject(path.relative_to(self.root).as_posix(), st.st_size, st.st_mtime)

    def remove_temporaries(self, older_than_s: float = 0.0) -> int:
        """Temp files a crash left behind (never visible under a final name); for GC.
        A younger one may be a write in progress in another process."""
        removed = 0
        cutoff = time.time() - older_than_s
        for path in self.root.rglob(TMP_PREFIX + "*"):
            try:
                if older_than_s and os.stat(path).st_mtime > cutoff:
                    continue
            except FileNotFoundError:
                continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def key_for_uri(self, uri: str) -> str | None:
        try:
            path = file_url_path(uri)
        except ValueError:  # not file://, or another machine's
            return None
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return None


# The hosts a file:// URL may name: this machine's.
LOCAL_FILE_HOSTS = frozenset({"", "localhost"})


def file_url_path(url: str) -> Path:
    """The local path of a file:// URL. ValueError for another scheme, and for a URL
    naming another host: its path is that machine's, and the same path here is
    another directory (file://host/x is not /x)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"not a file:// URL: {url!r}")
    if parsed.netloc.lower() not in LOCAL_FILE_HOSTS:
        raise ValueError(f"file:// URL {url!r} names host {parsed.netloc!r}: only this machine's files can be used "
                         "(file:///path or file://localhost/path); mount a remote store and give its local path")
    return Path(unquote(parsed.path))
