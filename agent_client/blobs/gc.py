"""Garbage collection of a blob store that other processes may be writing to.

The coordinator decides which checkpoints are no longer needed (its GarbageCollect
answer lists their manifest URIs); this module turns that into deletions: those
manifests, then every pack (and, in older stores, every chunk object) no remaining
manifest references. A pack goes whole once no manifest names any chunk in it; one
still partly referenced is kept whole (packs are not rewritten to drop dead chunks).

Why a grace period and a second listing: a writer in another process (or on another
machine sharing the bucket) uploads its pack first and its manifest last, and reuses
packs its parent checkpoint names. A pack that looks unreferenced may therefore belong
to a checkpoint being written right now. So a pack is deleted only if it is older than
`grace_s` (a writer finishes a checkpoint well within it) *and* no manifest that
appeared after GC's first listing names it. The rule does not need a lock, which an
object store does not offer; what it assumes is that a put completes within the grace
period (minutes for a 64 MiB state on a slow link; the default is an hour).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import AbstractSet, Iterable

from agent_client.blobs.backend import ChunkBackend, DirectoryBackend
from agent_client.blobs.errors import BlobMissing
from agent_client.blobs.layout import CHUNKS, MANIFESTS, PACKS, manifest_digest
from agent_client.blobs.manifest import MAX_MANIFEST_BYTES, Manifest

DEFAULT_GRACE_S = 3600.0


@dataclass(frozen=True)
class GcResult:
    manifests_removed: int
    chunks_removed: int  # objects holding one chunk each (stores written before packs)
    bytes_freed: int
    packs_removed: int = 0


def read_manifest(backend: ChunkBackend, key: str) -> Manifest:
    digest = manifest_digest(key)
    if digest is None:
        raise BlobMissing(f"{backend.uri(key)} is not a manifest of this blob store")
    return Manifest.from_json(backend.get(key, max_bytes=MAX_MANIFEST_BYTES), digest, backend.uri(key))


def _referenced_objects(backend: ChunkBackend, manifest_keys: Iterable[str]) -> set[str]:
    """Keys of the packs and chunk objects the manifests name. An unreadable manifest
    raises: without its chunk list, deleting anything could destroy a checkpoint
    someone still relies on."""
    referenced: set[str] = set()
    for key in manifest_keys:
        manifest = read_manifest(backend, key)
        keys = (c.key(manifest.key_id) for c in manifest.chunks)
        referenced.update(key for key in keys if key is not None)  # None: inline, in the manifest itself
    return referenced


def collect(backend: ChunkBackend, *, live: set[str] | None = None, deletable: AbstractSet[str] = frozenset(),
            grace_s: float = DEFAULT_GRACE_S, now: float | None = None) -> GcResult:
    """Delete manifests, then unreferenced packs and chunk objects older than `grace_s`.

    With `live` (manifest keys to keep), every other manifest older than the grace
    period goes: a younger one may be a checkpoint not yet committed. Without it, the
    manifests in `deletable` go (already released by the coordinator) and all others
    stay. A live manifest that is missing aborts before anything is deleted."""
    now = time.time() if now is None else now
    snapshot = {entry.key: entry for entry in backend.entries(MANIFESTS)}
    if live is not None:
        missing = live - snapshot.keys()
        if missing:
            raise BlobMissing(f"live manifests are missing, GC not run: {sorted(missing)}")
        doomed = {k for k, e in snapshot.items() if k not in live and now - e.modified >= grace_s}
    else:
        doomed = deletable & snapshot.keys()
    referenced = _referenced_objects(backend, snapshot.keys() - doomed)
    for key in sorted(doomed):
        backend.delete(key)
    candidates = [e for prefix in (PACKS, CHUNKS) for e in backend.entries(prefix)
                  if e.key not in referenced and now - e.modified >= grace_s]
    written_since = {key for key in backend.keys(MANIFESTS) if key not in snapshot}
    referenced |= _referenced_objects(backend, written_since)
    removed = [e for e in candidates if e.key not in referenced]
    for entry in removed:
        backend.delete(entry.key)
    if isinstance(backend, DirectoryBackend):
        backend.remove_temporaries(older_than_s=grace_s)
    packs = sum(1 for e in removed if e.key.startswith(PACKS + "/"))
    return GcResult(len(doomed), len(removed) - packs, sum(e.size for e in removed), packs)
