"""LocalBlobStore: content-addressed, chunked, verified checkpoint blobs.

Blobs never go through Raft: the agent writes its state here and registers only the
manifest URI and the state's SHA-256 with the coordinator. A state is cut into
content-defined chunks (see chunking.py) named by the SHA-256 of their plaintext, so
an incremental checkpoint writes only chunks no earlier checkpoint wrote. Chunks are
written before the manifest that names them, so a crash mid-checkpoint leaves only
unreferenced chunks (garbage), never a manifest pointing at nothing.

Reads trust nothing on disk: every chunk is checked against its digest and length and
the reassembled state against the whole-state SHA-256, and errors name the URI and
chunk so an operator knows what to look at.

Writes are create-only: an object already stored under a chunk's name is read back
and verified, not trusted (a damaged one is replaced), so a bad object left by a
crash or a faulty disk never lets a new checkpoint reference garbage.

Concurrency: in-process, put() and collect_garbage() exclude each other; across
processes and machines (agents sharing one bucket prefix), GC relies on its grace
period and second listing instead (see gc.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

from agent_client.blobs import chunking, gc
from agent_client.blobs.aead import ALGORITHM as AEAD_ALGORITHM
from agent_client.blobs.aead import OVERHEAD as AEAD_OVERHEAD
from agent_client.blobs.aead import ChunkCipher, aead_key_from_env
from agent_client.blobs.backend import ChunkBackend, DirectoryBackend
from agent_client.blobs.errors import BlobCorrupted, BlobMissing
from agent_client.blobs.gc import GcResult
from agent_client.blobs.layout import CHUNKS, MANIFESTS, chunk_key, manifest_digest, manifest_key
from agent_client.blobs.manifest import ChunkRef, Manifest, check_chunk_count

__all__ = ["CHUNKS", "MANIFESTS", "BlobStore", "GcResult", "LocalBlobStore", "PutResult", "chunk_key"]


@dataclass(frozen=True)
class PutResult:
    uri: str
    sha256: str  # of the whole plaintext state
    size: int
    bytes_written: int  # chunk bytes as stored (ciphertext if encrypted) + manifest
    chunks_total: int
    chunks_new: int
    manifest: Manifest  # pass as `parent` to the next put


class BlobStore(Protocol):
    def put(self, data: bytes | bytearray | memoryview, *, parent: Manifest | None = None) -> PutResult: ...
    def get(self, uri: str) -> bytes: ...
    def delete(self, uri: str) -> None: ...
    def collect_garbage(self, live_uris: Iterable[str] | None = None) -> GcResult: ...


class LocalBlobStore:
    """A BlobStore over any ChunkBackend (default: a directory, file:// URIs; see
    location.open_blob_store for s3://). `write_threads` bounds the chunks uploaded or
    downloaded at once."""

    def __init__(self, root: str | Path | None = None, *, key: bytes | None = None,
                 backend: ChunkBackend | None = None, write_threads: int = 4) -> None:
        if backend is None:
            if root is None:
                raise ValueError("give a root directory or a backend")
            backend = DirectoryBackend(root)
        self.backend = backend
        self._cipher = ChunkCipher(key) if key is not None else None
        self._lock = threading.Lock()
        self._write_threads = max(1, write_threads)
        # One pool for the store's life: starting 16 threads per put cost ~15 ms.
        self._pool = ThreadPoolExecutor(max_workers=self._write_threads, thread_name_prefix="blob-io")
        weakref.finalize(self, self._pool.shutdown, wait=False)  # idle threads go with the store

    @classmethod
    def from_env(cls, root: str | Path, env: Mapping[str, str] | None = None) -> "LocalBlobStore":
        """Encrypted iff RAFTPOINT_AEAD_KEY / RAFTPOINT_AEAD_KEY_FILE is set (a Kubernetes
        Secret mounted as a file or exposed as an env var)."""
        return cls(root, key=aead_key_from_env(env))

    @property
    def key_id(self) -> str | None:
        return None if self._cipher is None else self._cipher.key_id

    # ---- write ----------------------------------------------------------------------
    def put(self, data: bytes | bytearray | memoryview, *, parent: Manifest | None = None) -> PutResult:
        """Store `data`; chunks already present are not rewritten.

        `parent` (the previous checkpoint's manifest) spares an existence check per
        chunk it already holds -- one round trip each on an object store -- once its
        own manifest is confirmed present (so GC cannot have taken its chunks).
        Chunks are hashed and written as slices of one memoryview: a 64 MiB state is
        never copied (the caller must not mutate a bytearray until put returns)."""
        with self._lock, memoryview(data) as whole, whole.cast("B") as view:
            bounds = chunking.chunk_bounds(view)
            check_chunk_count(len(bounds), len(view))
            known = self._known_chunks(parent)
            refs: list[ChunkRef] = []
            pending: list[Future[int]] = []
            pool = self._pool
            whole_digest = pool.submit(lambda: hashlib.sha256(view).hexdigest())  # overlaps the chunk loop
            try:
                for start, end in bounds:
                    piece = view[start:end]
                    digest = hashlib.sha256(piece).hexdigest()
                    refs.append(ChunkRef(digest, len(piece)))
                    if digest not in known:
                        known.add(digest)
                        pending.append(pool.submit(self._store_chunk, digest, piece))
                written_per_chunk = [f.result() for f in pending]  # re-raises a failed write
                sha256 = whole_digest.result()
            except BaseException:
                tasks: list[Future[Any]] = [whole_digest, *pending]
                wait([f for f in tasks if not f.cancel()])  # no task may outlive the view it reads
                raise
            written = sum(written_per_chunk)
            new = sum(1 for n in written_per_chunk if n)
            manifest = Manifest(len(view), sha256, tuple(refs), chunking.ALGORITHM,
                                self.key_id, None if self._cipher is None else AEAD_ALGORITHM,
                                None if parent is None else parent.digest)
            body = manifest.to_json()
            key = self._store_manifest(manifest, body)
            # One flush for chunks and manifest: until it returns the checkpoint is not
            # committed anywhere, so a name a power loss took only makes the next put
            # that needs the chunk write it again.
            self.backend.flush()
            return PutResult(self.backend.uri(key), manifest.sha256, manifest.size, written + len(body),
                             len(refs), new, manifest)

    def _store_chunk(self, digest: str, piece: memoryview) -> int:
        """Write one chunk unless an intact copy is stored; returns bytes written. Runs in
        the write pool: fsync, uploads and SHA-256/AES-GCM on large buffers release the
        GIL, so a few threads overlap the per-chunk latency of a large new checkpoint."""
        key = chunk_key(digest, self.key_id)
        stored = piece if self._cipher is None else self._cipher.seal(digest, piece)
        for _ in range(2):
            if self.backend.create(key, stored):
                return len(stored)
            if self._intact(key, digest, len(piece)):
                return 0
            self.backend.delete(key)  # damaged: the one case a chunk name is written twice
        raise BlobCorrupted(f"chunk {digest} at {self.backend.uri(key)} is damaged and could not be replaced")

    def _intact(self, key: str, digest: str, size: int) -> bool:
        try:
            self._open_chunk(key, digest, size, where=self.backend.uri(key))
        except (BlobMissing, BlobCorrupted):
            return False
        return True

    def _store_manifest(self, manifest: Manifest, body: bytes) -> str:
        key = manifest_key(manifest.digest)
        if not self.backend.create(key, body):
            try:
                intact = self.backend.get(key, max_bytes=len(body)) == body
            except BlobMissing:
                intact = False
            if not intact:
                self.backend.put(key, body)
        return key

    def _known_chunks(self, parent: Manifest | None) -> set[str]:
        if parent is None or parent.key_id != self.key_id:
            return set()
        if not self.backend.exists(manifest_key(parent.digest)):
            return set()
        return {c.digest for c in parent.chunks}

    # ---- read -----------------------------------------------------------------------
    def _manifest_key(self, uri: str) -> str:
        key = self.backend.key_for_uri(uri)
        if key is None or manifest_digest(key) is None:
            raise BlobMissing(f"{uri} is not a manifest of this blob store")
        return key

    def manifest(self, uri: str) -> Manifest:
        return gc.read_manifest(self.backend, self._manifest_key(uri))

    def _open_chunk(self, key: str, digest: str, size: int, where: str) -> bytes:
        """The chunk's plaintext, checked against its digest and length."""
        overhead = 0 if self._cipher is None else AEAD_OVERHEAD
        try:
            stored = self.backend.get(key, max_bytes=size + overhead)
        except BlobMissing:
            raise BlobMissing(f"chunk {digest} of {where} is missing") from None
        piece = stored if self._cipher is None else self._cipher.open(digest, stored, where)
        if len(piece) != size or hashlib.sha256(piece).hexdigest() != digest:
            raise BlobCorrupted(f"chunk {digest} of {where} does not match its digest")
        return piece

    def get(self, uri: str) -> bytes:
        """The exact state put() stored, or BlobMissing / BlobCorrupted saying what failed
        (BlobStoreUnavailable if the store cannot be reached)."""
        manifest = self.manifest(uri)
        if manifest.key_id != self.key_id:
            raise BlobCorrupted(self._key_mismatch(uri, manifest))

        def fetch(item: tuple[int, ChunkRef]) -> bytes:
            index, ref = item
            return self._open_chunk(chunk_key(ref.digest, manifest.key_id), ref.digest, ref.size,
                                    f"{uri} (chunk #{index})")

        items = list(enumerate(manifest.chunks))
        parts = [fetch(item) for item in items] if len(items) <= 1 else list(self._pool.map(fetch, items))
        data = b"".join(parts)
        if len(data) != manifest.size or hashlib.sha256(data).hexdigest() != manifest.sha256:
            raise BlobCorrupted(f"{uri}: the reassembled state does not match its SHA-256")
        return data

    def _key_mismatch(self, uri: str, manifest: Manifest) -> str:
        if manifest.key_id is None:
            return f"{uri} is stored in clear but this store decrypts with key {self.key_id}"
        if self.key_id is None:
            return f"decryption failed for {uri}: it is encrypted (key {manifest.key_id}) and no AEAD key is configured"
        return f"decryption failed for {uri}: it was encrypted with key {manifest.key_id}, not {self.key_id} (wrong key)"

    # ---- copy -----------------------------------------------------------------------
    def copy_manifest(self, uri: str, copy: str) -> str:
        """The URI of a copy of the checkpoint at `uri`: the same state and chunks under a
        manifest named apart by `copy` (the same `copy` gives the same URI, so a retry
        makes no second one). Deleting either manifest leaves the other readable: the
        chunk sweep keeps every chunk a remaining manifest names. Needs no AEAD key."""
        manifest = dataclasses.replace(self.manifest(uri), copy=copy)
        with self._lock:
            key = self._store_manifest(manifest, manifest.to_json())
            self.backend.flush()
        return self.backend.uri(key)

    # ---- delete ---------------------------------------------------------------------
    def delete(self, uri: str) -> None:
        """Forget one checkpoint; its chunks go at the next collect_garbage()."""
        self.backend.delete(self._manifest_key(uri))

    def collect_garbage(self, live_uris: Iterable[str] | None = None, *, grace_s: float = 0.0) -> GcResult:
        """Remove manifests not in `live_uris` (None: keep every manifest), then every
        chunk no remaining manifest references, and crash leftovers. The default grace
        of 0 is safe only when no other process writes to this store (in-process, put()
        waits for GC); see gc.py."""
        with self._lock:
            live = None if live_uris is None else {self._manifest_key(u) for u in live_uris}
            return gc.collect(self.backend, live=live, grace_s=grace_s)

    def delete_checkpoints(self, uris: Iterable[str], *, grace_s: float = gc.DEFAULT_GRACE_S) -> GcResult:
        """Delete the checkpoints the coordinator released (its GarbageCollect answer), then
        the chunks no other manifest references, sparing any younger than `grace_s`.
        Every URI is checked before anything is deleted; already-deleted ones are fine."""
        with self._lock:
            deletable = {self._manifest_key(u) for u in uris}
            return gc.collect(self.backend, deletable=deletable, grace_s=grace_s)
