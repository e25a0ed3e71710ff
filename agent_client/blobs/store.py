"""LocalBlobStore: content-addressed, chunked, verified checkpoint blobs.

Blobs never go through Raft: the agent writes its state here and registers only the
manifest URI and the state's SHA-256 with the coordinator. A state is cut into
content-defined chunks (see chunking.py) identified by the SHA-256 of their
plaintext, so an incremental checkpoint writes only chunks that neither its parent
checkpoint nor one of the store's recent checkpoints holds.

A checkpoint's new chunks go into one pack (one file or one object), so a checkpoint
costs one data write and sync (or one PUT) plus its manifest's, not one per chunk; the
manifest records each chunk's pack and offset (see manifest.py). New chunks of at
most INLINE_MAX bytes in all travel inside the manifest: a small checkpoint is one
file. Durability rule: the pack is synced before the manifest naming it is written,
and the manifest before put returns, so no manifest, even one a crash left
uncommitted, names bytes a power loss could take; a crash before the manifest leaves
only an unreferenced pack (garbage).

A put cuts and hashes only what changed since the last state the store wrote or
read (last_state.py), and hashes the whole state beside the chunker (digests.py). A
state may come in parts, stored back to back without being joined; each part is
chunked on its own (last_state.py says why).

A state of at most `inline_max_bytes` (and the store not encrypting) is not stored
at all: its URI is a data: URI holding it (coordinator/core/data_uris.py), which
the coordinator's commit replicates and makes durable, so it costs no file, no sync
and no PUT. Reading, copying and deleting such a URI touch no backend either.

Reads trust nothing on disk: every chunk is checked against its digest and length and
the reassembled state against the whole-state SHA-256, and errors name the URI and
chunk so an operator knows what to look at.

Concurrency: in-process, puts run side by side (the writers of many LangGraph threads
share one store) and exclude garbage collection, which runs alone; across processes
and machines (agents sharing one bucket prefix), GC relies on its grace period and
second listing instead (see gc.py). Concurrent puts are safe because each writes a
pack of its own (a random id) and a manifest named by its content (equal bytes if two
race for it), flush() returns only once every file created before it is synced, and
the state a put compares with (`_last`) is immutable, read once and replaced whole.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import secrets
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generator, Iterable, Mapping, Protocol, Sequence

from agent_client.blobs import chunking, digests, gc
from agent_client.blobs.aead import ALGORITHM as AEAD_ALGORITHM
from agent_client.blobs.aead import OVERHEAD as AEAD_OVERHEAD
from agent_client.blobs.aead import ChunkCipher, aead_key_from_env
from agent_client.blobs.backend import Buffer, ChunkBackend, DirectoryBackend
from agent_client.blobs.digests import StateDigest
from agent_client.blobs.errors import BlobCorrupted, BlobMissing
from agent_client.blobs.gc import GcResult
from agent_client.blobs.last_state import LastPut
from agent_client.blobs.layout import CHUNKS, MANIFESTS, PACKS, chunk_key, manifest_digest, manifest_key, pack_key
from agent_client.blobs.manifest import INLINE, PACK_ID_HEX, ChunkRef, Manifest, check_chunk_count
from agent_client.blobs.packing import Chunk, PackPlan, split_small
from coordinator.core import data_uris
from coordinator.locks import SharedExclusiveLock

__all__ = ["CHUNKS", "MANIFESTS", "PACKS", "BlobStore", "GcResult", "LocalBlobStore", "PutResult", "chunk_key",
           "pack_key"]

# Restore reads neighbouring chunks of one pack in one request of up to this many
# bytes: few enough requests, and enough of them to keep the read threads busy.
READ_SPAN = 4 * 1024 * 1024
# Manifests this store wrote or read lately: their chunks are reused without a parent
# (a bound, so a long-lived store's memory does not grow with every checkpoint).
RECENT_MANIFESTS = 16
# States up to this many bytes travel inside the commit as data: URIs. Below it a
# blob's file, directory entry and sync cost more than the state's base64 in the Raft
# entry (docs/benchmarks.md, "Small states inline"); the coordinator caps it at
# data_uris.MAX_INLINE_BYTES.
DEFAULT_INLINE_MAX_BYTES = 4096


@dataclass(frozen=True)
class PutResult:
    uri: str
    sha256: str  # of the whole plaintext state
    size: int
    bytes_written: int  # chunk bytes as stored (ciphertext if encrypted) + manifest
    chunks_total: int
    chunks_new: int
    manifest: Manifest | None  # pass as `parent` to the next put; None for a state held inline


class BlobStore(Protocol):
    def put(self, data: Buffer | Sequence[Buffer], *, parent: Manifest | None = None,
            inline: bool = True) -> PutResult:
        """One buffer, or parts stored back to back as one state (`inline`: a small one
        may be returned as a data: URI instead of being stored)."""
    def get(self, uri: str) -> bytes: ...
    def delete(self, uri: str) -> None: ...
    def collect_garbage(self, live_uris: Iterable[str] | None = None) -> GcResult: ...


class LocalBlobStore:
    """A BlobStore over any ChunkBackend (default: a directory, file:// URIs; see
    location.open_blob_store for s3://). `write_threads` bounds the chunks uploaded or
    downloaded at once. With `keep_last_state`, the store holds on to the last state
    it wrote or read when that is a `bytes` (a reference: memory for one state), so
    the next put compares unchanged chunks instead of hashing them again (last_state.py).
    `inline_max_bytes`: states up to this size become data: URIs instead of blobs (0:
    never); an encrypting store never does so, since the coordinator would hold the
    state in clear."""

    def __init__(self, root: str | Path | None = None, *, key: bytes | None = None,
                 backend: ChunkBackend | None = None, write_threads: int = 4, keep_last_state: bool = True,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES) -> None:
        if not 0 <= inline_max_bytes <= data_uris.MAX_INLINE_BYTES:
            raise ValueError(f"inline_max_bytes must be between 0 and {data_uris.MAX_INLINE_BYTES} (the "
                             f"coordinator's cap), got {inline_max_bytes}")
        if backend is None:
            if root is None:
                raise ValueError("give a root directory or a backend")
            backend = DirectoryBackend(root)
        self.backend = backend
        self._cipher = ChunkCipher(key) if key is not None else None
        self.inline_max_bytes = 0 if key is not None else inline_max_bytes
        self._gc_lock = SharedExclusiveLock()  # puts shared, garbage collection exclusive
        self._write_threads = max(1, write_threads)
        # One pool for the store's life: starting 16 threads per put cost ~15 ms.
        self._pool = ThreadPoolExecutor(max_workers=self._write_threads, thread_name_prefix="blob-io")
        weakref.finalize(self, self._pool.shutdown, wait=False)  # idle threads go with the store
        self._recent: deque[Manifest] = deque(maxlen=RECENT_MANIFESTS)
        self._keep_last_state = keep_last_state
        self._last: LastPut | None = None
        # Chunk hashing is CPU-bound: more batches in flight than cores only delays the first.
        self._hash_ahead = max(1, min(self._write_threads, os.cpu_count() or 1))

    @classmethod
    def from_env(cls, root: str | Path, env: Mapping[str, str] | None = None) -> "LocalBlobStore":
        """Encrypted iff RAFTPOINT_AEAD_KEY / RAFTPOINT_AEAD_KEY_FILE is set (a Kubernetes
        Secret mounted as a file or exposed as an env var)."""
        return cls(root, key=aead_key_from_env(env))

    @property
    def key_id(self) -> str | None:
        return None if self._cipher is None else self._cipher.key_id

    # ---- write ----------------------------------------------------------------------
    def put(self, data: Buffer | Sequence[Buffer], *, parent: Manifest | None = None,
            inline: bool = True) -> PutResult:
        """Store `data` (one buffer, or parts stored back to back as one state);
        chunks the parent or a recent checkpoint of this store holds are not written again.
        With `inline`, a state of at most `inline_max_bytes` is not stored: the result's
        URI holds it (a data: URI) and has no manifest.

        `parent` (the previous checkpoint's manifest) and the recent manifests are
        trusted for where their chunks are once the manifest a reused chunk comes from is
        confirmed present (GC keeps every pack a present manifest names); every other
        chunk goes into this checkpoint's pack. Chunks are hashed and written as slices
        of the parts: a 64 MiB state is never copied, nor are parts joined (the caller
        must not mutate a bytearray until put returns). Each part is chunked on its
        own, so a part's end is always a cut (last_state.py says why). The whole
        state's SHA-256 is computed beside the chunking and the chunks' hashing (digests.py)."""
        parts = chunking.parts_of(data)
        if inline and sum(memoryview(part).nbytes for part in parts) <= self.inline_max_bytes:
            return _put_inline(parts)
        with self._gc_lock.shared(), contextlib.ExitStack() as views_open:
            views = [views_open.enter_context(views_open.enter_context(memoryview(part)).cast("B"))
                     for part in parts]
            last = self._last
            shared = [0] * len(views) if last is None else last.shared_prefixes(views)
            # First, so it runs beside the chunker: it does not depend on the cuts.
            whole_digest = self._pool.submit(digests.state_digest, views,
                                             () if last is None else last.hashed_prefix(views, shared))
            try:
                result = self._put(views, parent, whole_digest, last, shared)
            finally:
                whole_digest.cancel()
                wait([whole_digest])  # no task may outlive the views it reads
            if self._keep_last_state and result.manifest is not None:  # a stored state always has one
                self._last = LastPut.of(parts, result.manifest, whole_digest.result())
            return result

    def _put(self, views: list[memoryview], parent: Manifest | None, whole_digest: Future[StateDigest],
             last: LastPut | None, shared: list[int]) -> PutResult:
        pieces: list[memoryview] = []
        seen: list[Callable[[], str | None] | None] = []  # per chunk: its digest in the last state, if there
        for index, view in enumerate(views):
            known = None if last is None else last.part(index)
            bounds = chunking.chunk_bounds(view) if known is None else known.cut(view, shared[index])
            pieces.extend(view[start:end] for start, end in bounds)
            seen.extend(None if known is None else functools.partial(known.digest, view, start, end, shared[index])
                        for start, end in bounds)
        size = sum(len(view) for view in views)
        check_chunk_count(len(pieces), size)
        overhead = 0 if self._cipher is None else AEAD_OVERHEAD
        plan = PackPlan(overhead, self._seal)
        chunks = self._chunks(pieces, self._reuse_lookup(parent), seen)
        try:
            head, small = split_small(chunks, overhead)
            if small:
                stored = list(plan.stream(head))
                inline = b"".join(stored) if stored else None
            else:
                inline, plan.pack = None, secrets.token_hex(PACK_ID_HEX // 2)
                self._store_pack(plan.pack, plan.stream(itertools.chain(head, chunks)))
        finally:
            chunks.close()  # stops the hashing still under way
        manifest = Manifest(size, whole_digest.result().sha256, tuple(plan.refs), chunking.ALGORITHM,
                            self.key_id, None if self._cipher is None else AEAD_ALGORITHM,
                            None if parent is None else parent.digest, inline=inline)
        body = manifest.to_json()
        key = self._store_manifest(manifest, body)
        self.backend.flush()
        self._recent.append(manifest)
        return PutResult(self.backend.uri(key), manifest.sha256, manifest.size,
                         (0 if inline is not None else plan.written) + len(body), len(plan.refs),
                         len(plan.placed), manifest)

    def _chunks(self, pieces: list[memoryview], stored_at: Callable[[str], ChunkRef | None],
                seen: list[Callable[[], str | None] | None]) -> Generator[Chunk, None, None]:
        """The state's chunks in order with their SHA-256 and where each is already
        stored, hashed ahead of the caller, which writes the pack meanwhile (`seen`:
        per chunk, the digest of the chunk the last state held at the same place)."""
        def known(index: int) -> str | None:
            lookup = seen[index]
            return None if lookup is None else lookup()

        hashed = digests.chunk_digests(pieces, self._pool, self._hash_ahead, known)
        try:
            for piece, digest in zip(pieces, hashed):
                yield digest, piece, stored_at(digest)
        finally:
            hashed.close()

    def _seal(self, digest: str, piece: memoryview) -> bytes | memoryview:
        """A new chunk as stored: sealed if the store encrypts, else as it is."""
        return piece if self._cipher is None else self._cipher.seal(digest, piece)

    def _store_pack(self, pack: str, parts: Iterable[chunking.Buffer]) -> None:
        """Write the stored chunks as one pack and make it durable before any manifest
        names it."""
        key = pack_key(pack, self.key_id)
        if not self.backend.create(key, parts):  # a random 128-bit id: taken only by a bug
            raise BlobCorrupted(f"pack {self.backend.uri(key)} already exists; not overwritten")
        self.backend.flush()

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

    def _reuse_lookup(self, parent: Manifest | None) -> Callable[[str], ChunkRef | None]:
        """Where a chunk is already stored, by digest: in the parent or a recent manifest
        that is still present (checked once per manifest, when a chunk is first found
        in it; the newest manifest naming a chunk is the one asked)."""
        recent = tuple(self._recent)  # one step under the GIL: get() may append meanwhile
        found: dict[str, tuple[ChunkRef, Manifest]] = {}
        for manifest in (*recent, *([parent] if parent is not None else [])):
            if manifest.key_id == self.key_id:  # inline chunks live in another manifest: not nameable
                found.update((c.digest, (c, manifest)) for c in manifest.chunks if c.pack != INLINE)
        present: dict[int, bool] = {}

        def stored_at(digest: str) -> ChunkRef | None:
            hit = found.get(digest)
            if hit is None:
                return None
            ref, manifest = hit
            if id(manifest) not in present:
                present[id(manifest)] = self.backend.exists(manifest_key(manifest.digest))
            return ref if present[id(manifest)] else None
        return stored_at

    # ---- read -----------------------------------------------------------------------
    def holds(self, uri: str) -> bool:
        """Whether this store reads `uri`: one of its manifests, or a data: URI (which
        every store reads)."""
        return data_uris.is_inline(uri) or self.backend.key_for_uri(uri) is not None

    def _manifest_key(self, uri: str) -> str:
        key = self.backend.key_for_uri(uri)
        if key is None or manifest_digest(key) is None:
            raise BlobMissing(f"{data_uris.shown_uri(uri)} is not a manifest of this blob store")
        return key

    def _manifest_keys(self, uris: Iterable[str]) -> set[str]:
        """The manifests of checkpoints named by URI, each checked; data: URIs have none."""
        return {self._manifest_key(u) for u in uris if not data_uris.is_inline(u)}

    def manifest(self, uri: str) -> Manifest:
        return gc.read_manifest(self.backend, self._manifest_key(uri))

    def _open_chunk(self, ref: ChunkRef, stored: bytes, where: str) -> bytes:
        """The chunk's plaintext from its stored bytes, checked against its digest and length."""
        piece = stored if self._cipher is None else self._cipher.open(ref.digest, stored, where)
        if len(piece) != ref.size or digests.sha256_hex(piece) != ref.digest:
            raise BlobCorrupted(f"chunk {ref.digest} of {where} does not match its digest")
        return piece

    def _read_span(self, span: list[tuple[int, ChunkRef]], manifest: Manifest, uri: str) -> list[bytes]:
        """The plaintexts of chunks stored back to back in one object, read in one request."""
        overhead = 0 if self._cipher is None else AEAD_OVERHEAD
        first = span[0][1]
        key = first.key(manifest.key_id)
        length = sum(ref.size + overhead for _, ref in span)
        try:
            if key is None:
                stored = (manifest.inline or b"")[first.offset:first.offset + length]
            elif first.pack is None:  # a chunk stored as its own object (older stores)
                stored = self.backend.get(key, max_bytes=length)
            else:
                stored = self.backend.get_range(key, first.offset, length)
        except BlobMissing:
            raise BlobMissing(f"chunk {first.digest} of {uri} (chunk #{span[0][0]}) is missing: "
                              f"{self.backend.uri(key or '')} is gone") from None
        pieces, at = [], 0
        for index, ref in span:
            end = len(stored) if first.pack is None else at + ref.size + overhead
            pieces.append(self._open_chunk(ref, stored[at:end], f"{uri} (chunk #{index})"))
            at = end
        return pieces

    def get(self, uri: str) -> bytes:
        """The exact state put() stored, or BlobMissing / BlobCorrupted saying what failed
        (BlobStoreUnavailable if the store cannot be reached)."""
        if data_uris.is_inline(uri):
            return _get_inline(uri)
        manifest = self.manifest(uri)
        if manifest.key_id != self.key_id:
            raise BlobCorrupted(self._key_mismatch(uri, manifest))
        spans = read_spans(manifest.chunks, 0 if self._cipher is None else AEAD_OVERHEAD)

        def fetch(span: list[tuple[int, ChunkRef]]) -> list[bytes]:
            return self._read_span(span, manifest, uri)

        parts = [fetch(span) for span in spans] if len(spans) <= 1 else list(self._pool.map(fetch, spans))
        data = b"".join(piece for pieces in parts for piece in pieces)
        whole = digests.state_digest([data])
        if len(data) != manifest.size or whole.sha256 != manifest.sha256:
            raise BlobCorrupted(f"{uri}: the reassembled state does not match its SHA-256")
        self._recent.append(manifest)  # a restored state's next checkpoint reuses its chunks (append is atomic)
        if self._keep_last_state:
            self._last = LastPut.of([data], manifest, whole)  # one assignment: a put under way keeps the one it read
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
        chunk sweep keeps every chunk a remaining manifest names. Needs no AEAD key. A
        data: URI is its own copy: nothing deletes it."""
        if data_uris.is_inline(uri):
            return uri
        manifest = dataclasses.replace(self.manifest(uri), copy=copy)
        with self._gc_lock.shared():
            key = self._store_manifest(manifest, manifest.to_json())
            self.backend.flush()
        return self.backend.uri(key)

    # ---- delete ---------------------------------------------------------------------
    def delete(self, uri: str) -> None:
        """Forget one checkpoint; its chunks go at the next collect_garbage(). A data:
        URI has nothing stored to forget."""
        if data_uris.is_inline(uri):
            return
        self.backend.delete(self._manifest_key(uri))

    def collect_garbage(self, live_uris: Iterable[str] | None = None, *, grace_s: float = 0.0) -> GcResult:
        """Remove manifests not in `live_uris` (None: keep every manifest), then every
        chunk no remaining manifest references, and crash leftovers. The default grace
        of 0 is safe only when no other process writes to this store (in-process, put()
        waits for GC); see gc.py."""
        with self._gc_lock.exclusive():
            live = None if live_uris is None else self._manifest_keys(live_uris)
            self._recent.clear()
            return gc.collect(self.backend, live=live, grace_s=grace_s)

    def delete_checkpoints(self, uris: Iterable[str], *, grace_s: float = gc.DEFAULT_GRACE_S) -> GcResult:
        """Delete the checkpoints the coordinator released (its GarbageCollect answer), then
        the chunks no other manifest references, sparing any younger than `grace_s`.
        Every URI is checked before anything is deleted; already-deleted ones are fine."""
        with self._gc_lock.exclusive():
            deletable = self._manifest_keys(uris)
            self._recent.clear()
            return gc.collect(self.backend, deletable=deletable, grace_s=grace_s)


def _put_inline(parts: Sequence[Buffer]) -> PutResult:
    """A state as a data: URI, written nowhere: the commit naming it carries it."""
    data = b"".join(parts)
    sha256 = digests.sha256_hex(data)
    return PutResult(data_uris.encode(data, sha256), sha256, len(data), 0, 0, 0, None)


def _get_inline(uri: str) -> bytes:
    """A data: URI's bytes, checked against the SHA-256 it names as a blob's are."""
    try:
        inline = data_uris.decode(uri)
    except data_uris.MalformedDataUri as exc:
        raise BlobCorrupted(f"{data_uris.shown_uri(uri)} {exc}") from None
    if inline.sha256 is not None and digests.sha256_hex(inline.data) != inline.sha256:
        raise BlobCorrupted(f"{data_uris.shown_uri(uri)}: its bytes do not match the SHA-256 it names")
    return inline.data


def read_spans(refs: Iterable[ChunkRef], overhead: int) -> list[list[tuple[int, ChunkRef]]]:
    """The chunks grouped into reads: neighbours in one pack (each starting where the
    previous one's stored bytes end) share a read of at most READ_SPAN bytes; a chunk
    stored as its own object is a read alone."""
    spans: list[list[tuple[int, ChunkRef]]] = []
    span_bytes = 0
    for index, ref in enumerate(refs):
        stored = ref.size + overhead
        if spans and ref.pack is not None:
            _, last = spans[-1][-1]
            if (last.pack == ref.pack and ref.offset == last.offset + last.size + overhead
                    and span_bytes + stored <= READ_SPAN):
                spans[-1].append((index, ref))
                span_bytes += stored
                continue
        spans.append([(index, ref)])
        span_bytes = stored
    return spans
