"""One place that turns a blob store location (what users type) into a backend.

A location is a directory path, a file:// URL, or `s3://bucket/prefix?endpoint=...`.
Agents, the console's `gc`/`demo` commands and the chaos workload all go through here,
so a new scheme is added once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping
from urllib.parse import urlparse

from agent_client.blobs.aead import aead_key_from_env
from agent_client.blobs.backend import ChunkBackend, DirectoryBackend, file_url_path
from agent_client.blobs.store import DEFAULT_INLINE_MAX_BYTES, LocalBlobStore

OBJECT_STORE_SCHEMES = frozenset({"s3"})


def local_root(location: str | Path) -> Path | None:
    """The directory of a local location, None for an object store; ValueError if unknown."""
    if isinstance(location, Path):
        return location
    parsed = urlparse(location)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        return None
    if parsed.scheme == "file":
        return file_url_path(location)
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive, not a scheme
        raise ValueError(f"unsupported blob store location {parsed.scheme}://... "
                         f"(a directory, file://, or {', '.join(s + '://' for s in sorted(OBJECT_STORE_SCHEMES))})")
    return Path(location)


def sub_location(location: str | Path, name: str) -> str:
    """`location` narrowed to a sub-directory or sub-prefix `name` (one per group, say),
    keeping an s3:// URL's parameters."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a single path segment: {name!r}")
    if local_root(location) is not None and urlparse(str(location)).scheme != "file":
        return str(Path(location) / name)
    base, sep, query = str(location).partition("?")
    return f"{base.rstrip('/')}/{name}{sep}{query}"


def backend_for(location: str | Path, *, env: Mapping[str, str] | None = None) -> ChunkBackend:
    root = local_root(location)
    if root is not None:
        return DirectoryBackend(root)
    try:
        from agent_client.blobs.s3 import S3Backend
    except ImportError as exc:
        raise ImportError(f"s3:// blob stores need obstore ({exc}): pip install 'raftpoint[s3]'") from None
    return S3Backend(str(location), env=env)


def open_blob_store(location: str | Path, *, key: bytes | None = None, env: Mapping[str, str] | None = None,
                    key_from_env: bool = False, inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES) -> LocalBlobStore:
    """The blob store at `location`; encrypted with `key`, or with the key from the
    environment when `key_from_env` (RAFTPOINT_AEAD_KEY / RAFTPOINT_AEAD_KEY_FILE);
    states up to `inline_max_bytes` travel as data: URIs (LocalBlobStore)."""
    if key is None and key_from_env:
        key = aead_key_from_env(env)
    backend = backend_for(location, env=env)
    # Requests in flight: a directory's writes are CPU-bound past a few; an object store's
    # are round trips (835 for a new 64 MiB state), so more of them overlap.
    threads = 8 if isinstance(backend, DirectoryBackend) else 32
    return LocalBlobStore(backend=backend, key=key, write_threads=threads, inline_max_bytes=inline_max_bytes)
