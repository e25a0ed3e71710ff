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

Concurrency: one writer process per root. In-process, put() and collect_garbage()
exclude each other; across processes, run GC only from the process that writes.
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Protocol

from agent_client.blobs import chunking
from agent_client.blobs.aead import ALGORITHM as AEAD_ALGORITHM
from agent_client.blobs.aead import ChunkCipher, aead_key_from_env
from agent_client.blobs.backend import ChunkBackend, DirectoryBackend
from agent_client.blobs.errors import BlobCorrupted, BlobMissing
from agent_client.blobs.manifest import ChunkRef, Manifest

MANIFESTS = "manifests"
CHUNKS = "chunks"


@dataclass(frozen=True)
class PutResult:
    uri: str
    sha256: str  # of the whole plaintext state
    size: int
    bytes_written: int  # chunk bytes as stored (ciphertext if encrypted) + manifest
    chunks_total: int
    chunks_new: int
    manifest: Manifest  # pass as `parent` to the next put


@dataclass(frozen=True)
class GcResult:
    manifests_removed: int
    chunks_removed: int
    bytes_freed: int


class BlobStore(Protocol):
    def put(self, data: bytes | bytearray | memoryview, *, parent: Manifest | None = None) -> PutResult: ...
    def get(self, uri: str) -> bytes: ...
    def delete(self, uri: str) -> None: ...
    def collect_garbage(self, live_uris: Iterable[str] | None = None) -> GcResult: ...


def _namespace(key_id: str | None) -> str:
    return "plain" if key_id is None else f"aead-{key_id}"


def chunk_key(digest: str, key_id: str | None) -> str:
    """Fan out by digest prefix: directories stay small with millions of chunks."""
    return f"{CHUNKS}/{_namespace(key_id)}/{digest[:2]}/{digest}"


class LocalBlobStore:
    """A BlobStore over any ChunkBackend (default: a directory, file:// URIs)."""

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
            known = self._known_chunks(parent)
            refs: list[ChunkRef] = []
            pending: list[Future[int]] = []
            with ThreadPoolExecutor(max_workers=self._write_threads) as pool:
                for start, end in chunking.chunk_bounds(view):
                    piece = view[start:end]
                    digest = hashlib.sha256(piece).hexdigest()
                    refs.append(ChunkRef(digest, len(piece)))
                    if digest not in known:
                        known.add(digest)
                        pending.append(pool.submit(self._store_chunk, digest, piece))
                written_per_chunk = [f.result() for f in pending]  # re-raises a failed write
            written = sum(written_per_chunk)
            new = sum(1 for n in written_per_chunk if n)
            manifest = Manifest(len(view), hashlib.sha256(view).hexdigest(), tuple(refs), chunking.ALGORITHM,
                                self.key_id, None if self._cipher is None else AEAD_ALGORITHM,
                                None if parent is None else parent.digest)
            body = manifest.to_json()
            key = f"{MANIFESTS}/{manifest.digest}.json"
            self.backend.put(key, body)
            return PutResult(self.backend.uri(key), manifest.sha256, manifest.size, written + len(body),
                             len(refs), new, manifest)

    def _store_chunk(self, digest: str, piece: memoryview) -> int:
        """Write one chunk unless present; returns bytes written. Runs in the write pool:
        fsync and SHA-256/AES-GCM on large buffers release the GIL, so a few threads
        overlap the per-file fsyncs that dominate a large new checkpoint."""
        key = chunk_key(digest, self.key_id)
        if self.backend.exists(key):
            return 0
        stored = piece if self._cipher is None else self._cipher.seal(digest, piece)
        self.backend.put(key, stored)
        return len(stored)

    def _known_chunks(self, parent: Manifest | None) -> set[str]:
        if parent is None or parent.key_id != self.key_id:
            return set()
        if not self.backend.exists(f"{MANIFESTS}/{parent.digest}.json"):
            return set()
        return {c.digest for c in parent.chunks}

    # ---- read -----------------------------------------------------------------------
    def _manifest_key(self, uri: str) -> str:
        key = self.backend.key_for_uri(uri)
        if key is None or not key.startswith(MANIFESTS + "/") or not key.endswith(".json") or key.count("/") != 1:
            raise BlobMissing(f"{uri} is not a manifest of this blob store")
        return key

    def manifest(self, uri: str) -> Manifest:
        key = self._manifest_key(uri)
        return Manifest.from_json(self.backend.get(key), key.split("/")[1][:-5], uri)

    def get(self, uri: str) -> bytes:
        """The exact state put() stored, or BlobMissing / BlobCorrupted saying what failed."""
        manifest = self.manifest(uri)
        if manifest.key_id != self.key_id:
            raise BlobCorrupted(self._key_mismatch(uri, manifest))
        parts = []
        for index, ref in enumerate(manifest.chunks):
            where = f"{uri} (chunk #{index})"
            try:
                stored = self.backend.get(chunk_key(ref.digest, manifest.key_id))
            except BlobMissing:
                raise BlobMissing(f"chunk {ref.digest} of {where} is missing") from None
            piece = stored if self._cipher is None else self._cipher.open(ref.digest, stored, where)
            if len(piece) != ref.size or hashlib.sha256(piece).hexdigest() != ref.digest:
                raise BlobCorrupted(f"chunk {ref.digest} of {where} does not match its digest")
            parts.append(piece)
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

    # ---- delete ---------------------------------------------------------------------
    def delete(self, uri: str) -> None:
        """Forget one checkpoint; its chunks go at the next collect_garbage()."""
        self.backend.delete(self._manifest_key(uri))

    def collect_garbage(self, live_uris: Iterable[str] | None = None) -> GcResult:
        """Remove manifests not in `live_uris` (None: keep every manifest), then every
        chunk no remaining manifest references, and crash leftovers.

        A live manifest that cannot be read aborts GC: without its chunk list, deleting
        anything could destroy a checkpoint the coordinator still relies on."""
        with self._lock:
            keep = None if live_uris is None else {self._manifest_key(u) for u in live_uris}
            present = list(self.backend.keys(MANIFESTS))
            missing = (keep or set()) - set(present)
            if missing:
                raise BlobMissing(f"live manifests are missing, GC not run: {sorted(missing)}")
            referenced: set[str] = set()
            for key in present:
                if keep is None or key in keep:
                    manifest = Manifest.from_json(self.backend.get(key), key.split("/")[1][:-5], self.backend.uri(key))
                    referenced.update(chunk_key(c.digest, manifest.key_id) for c in manifest.chunks)
            doomed = [key for key in present if keep is not None and key not in keep]
            for key in doomed:
                self.backend.delete(key)
            removed_chunks = freed = 0
            for key in list(self.backend.keys(CHUNKS)):
                if key not in referenced:
                    freed += self.backend.size(key)
                    self.backend.delete(key)
                    removed_chunks += 1
            if isinstance(self.backend, DirectoryBackend):
                self.backend.remove_temporaries()
            return GcResult(len(doomed), removed_chunks, freed)
