"""Where chunk and manifest bytes live, behind a five-method key/value interface.

The store above only needs put/get/exists/delete/keys on opaque keys plus a way to
name a key as a URI, so an object store (fsspec, S3) can replace the directory
without touching chunking, encryption or verification. Keys look like
"chunks/plain/ab/abcd..." and "manifests/<sha>.json".
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Protocol
from urllib.parse import unquote, urlparse

from agent_client.blobs.durable import TMP_PREFIX, atomic_write
from agent_client.blobs.errors import BlobMissing


class ChunkBackend(Protocol):
    def put(self, key: str, data: bytes) -> None:
        """Store durably and atomically: after return the key reads back whole, never partial.
        Called from several threads at once (distinct keys)."""

    def get(self, key: str) -> bytes:
        """The bytes; raises BlobMissing naming the key if absent."""

    def exists(self, key: str) -> bool: ...

    def size(self, key: str) -> int:
        """Stored length (for GC accounting) without reading the bytes."""

    def delete(self, key: str) -> None:
        """Idempotent."""

    def keys(self, prefix: str) -> Iterator[str]:
        """Every stored key under prefix (not in-progress temporaries)."""

    def uri(self, key: str) -> str:
        """The URI registered with the coordinator for a manifest key."""

    def key_for_uri(self, uri: str) -> str | None:
        """The inverse of uri(), or None if the URI is not of this backend."""


class DirectoryBackend:
    """A local (or mounted) directory; file:// URIs."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise ValueError(f"key {key!r} escapes the blob root")
        return path

    def put(self, key: str, data: bytes) -> None:
        atomic_write(self._path(key), data)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise BlobMissing(f"{self.uri(key)} is missing") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        return self._path(key).stat().st_size

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> Iterator[str]:
        base = self.root / prefix
        if base.is_dir():
            for path in base.rglob("*"):
                if path.is_file() and not path.name.startswith(TMP_PREFIX):
                    yield path.relative_to(self.root).as_posix()

    def remove_temporaries(self) -> int:
        """Temp files a crash left behind (never visible under a final name); for GC."""
        removed = 0
        for path in self.root.rglob(TMP_PREFIX + "*"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def key_for_uri(self, uri: str) -> str | None:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            return None
        path = Path(unquote(parsed.path))
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return None
