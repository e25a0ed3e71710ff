"""What a put hashes, and when (agent_client.blobs.digests): the whole state beside the
chunker, and unchanged chunks of the last state not again."""
from __future__ import annotations

import hashlib
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from agent_client.blobs import chunking
from agent_client.blobstore import LocalBlobStore

MIB = 1024 * 1024


def state(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def change_one_percent(data: bytes, seed: int) -> bytes:
    rng = random.Random(seed)
    changed = bytearray(data)
    span = len(data) // 100
    start = rng.randrange(0, len(data) - span)
    changed[start:start + span] = rng.randbytes(span)
    return bytes(changed)


def assert_digests_true(store: LocalBlobStore, uri: str, data: bytes) -> None:
    """Every chunk digest the manifest records is the SHA-256 of the bytes at its place."""
    manifest = store.manifest(uri)
    at = 0
    for index, ref in enumerate(manifest.chunks):
        assert ref.digest == hashlib.sha256(data[at:at + ref.size]).hexdigest(), f"chunk #{index} of {uri}"
        at += ref.size
    assert at == len(data) and manifest.sha256 == hashlib.sha256(data).hexdigest()
    assert LocalBlobStore(store.backend.root).get(uri) == data


class HashedBytes:
    """hashlib.sha256 replaced by one that counts the bytes it is given (at creation and
    by update) and calls `on_bytes` with the length of each piece."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, on_bytes: Callable[[int], None] = lambda n: None) -> None:
        self.total = 0
        self._lock = threading.Lock()
        self._on_bytes = on_bytes
        real = hashlib.sha256
        monkeypatch.setattr(hashlib, "sha256", lambda data=b"", **kw: Counting(self, real(b"", **kw), data))

    def count(self, data: Any) -> None:
        size = memoryview(data).nbytes
        with self._lock:
            self.total += size
        if size:
            self._on_bytes(size)


class Counting:
    """A hash object whose input HashedBytes counts."""

    def __init__(self, counter: HashedBytes, inner: Any, data: Any = b"") -> None:
        self._counter, self._inner = counter, inner
        self.update(data)

    def update(self, data: Any) -> None:
        self._counter.count(data)
        self._inner.update(data)

    def copy(self) -> "Counting":
        return Counting(self._counter, self._inner.copy())

    def hexdigest(self) -> str:
        return str(self._inner.hexdigest())


def test_the_whole_state_hash_runs_while_the_state_is_chunked(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator's record (the whole state's SHA-256) does not depend on the cut
    points, so it is under way before the chunker finishes (the chunks' hashing cannot
    be: it needs the cuts)."""
    store = LocalBlobStore(tmp_path)
    data = state(2 * MIB, seed=1)
    hashing = threading.Event()
    real_bounds = chunking.chunk_bounds
    seen: list[bool] = []

    def bounds(view: Any, **kw: Any) -> list[tuple[int, int]]:
        seen.append(hashing.wait(timeout=5))
        return real_bounds(view, **kw)
    HashedBytes(monkeypatch, on_bytes=lambda size: hashing.set())
    monkeypatch.setattr(chunking, "chunk_bounds", bounds)
    put = store.put(data)
    assert seen == [True], "nothing had been hashed 5 s into chunking"
    monkeypatch.undo()
    assert put.sha256 == hashlib.sha256(data).hexdigest()


def test_unchanged_chunks_of_the_last_state_are_not_hashed_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1%-changed state costs one pass of SHA-256 (the whole state's), not two; the
    digests it records are still the true ones."""
    store = LocalBlobStore(tmp_path)
    first = store.put(state(4 * MIB, seed=2))
    changed = change_one_percent(store.get(first.uri), seed=3)
    hashed = HashedBytes(monkeypatch)
    put = store.put(changed, parent=first.manifest)
    assert put.chunks_new < put.chunks_total / 5
    size = len(changed)
    assert hashed.total < 1.2 * size, f"hashed {hashed.total} bytes for a {size}-byte state"
    monkeypatch.undo()
    assert_digests_true(store, put.uri, changed)


def test_the_state_read_last_is_compared_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first checkpoint after a restore hashes only what changed since the restored state."""
    data = state(4 * MIB, seed=4)
    uri = LocalBlobStore(tmp_path).put(data).uri
    store = LocalBlobStore(tmp_path)  # a restarted writer
    restored = store.get(uri)
    hashed = HashedBytes(monkeypatch)
    put = store.put(change_one_percent(restored, seed=5), parent=store.manifest(uri))
    size = len(data)
    assert hashed.total < 1.2 * size, f"hashed {hashed.total} bytes for a {size}-byte state"
    monkeypatch.undo()
    assert_digests_true(store, put.uri, change_one_percent(restored, seed=5))


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_a_mutable_state_is_not_kept(tmp_path: Path, kind: type) -> None:
    """A bytearray (or a view of one) may change after put returns: its chunks are
    hashed again next time, never taken from what it held before."""
    buffer = bytearray(state(2 * MIB, seed=6))
    store = LocalBlobStore(tmp_path)
    store.put(kind(buffer))
    buffer[MIB:MIB + 1000] = bytes(1000)  # in place: same length, same cut points nearby
    put = store.put(kind(buffer))
    assert_digests_true(store, put.uri, bytes(buffer))


def test_without_keep_last_state_every_chunk_is_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalBlobStore(tmp_path, keep_last_state=False)
    first = store.put(state(2 * MIB, seed=7))
    hashed = HashedBytes(monkeypatch)
    store.put(change_one_percent(state(2 * MIB, seed=7), seed=8), parent=first.manifest)
    assert hashed.total >= 2 * 2 * MIB


def test_a_failed_put_leaves_no_hashing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put that fails while writing its pack returns only once no task reads the
    caller's buffer: the bytearray can be resized at once."""
    store = LocalBlobStore(tmp_path)
    buffer = bytearray(state(16 * MIB, seed=9))
    real_sha = hashlib.sha256

    def slow_chunk_sha(data: Any = b"", **kw: Any) -> Any:
        if memoryview(data).nbytes < len(buffer):  # a chunk: keeps its batch running past the failure
            time.sleep(0.01)
        return real_sha(data, **kw)

    def failing_create(key: str, parts: Any) -> bool:
        next(iter(parts))
        raise OSError("disk full")
    monkeypatch.setattr(hashlib, "sha256", slow_chunk_sha)
    monkeypatch.setattr(store.backend, "create", failing_create)
    with pytest.raises(OSError, match="disk full"):
        store.put(buffer)
    buffer.extend(b"more")  # BufferError while any task still holds a view of it
    assert len(buffer) == 16 * MIB + 4


def test_a_put_encodes_its_manifest_twice_and_its_parent_not_again(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoding a manifest of 835 entries costs about half a millisecond: once for the
    bytes stored, once for its name, and never again for the parent a put names."""
    from agent_client.blobs.manifest import Manifest
    store = LocalBlobStore(tmp_path)
    first = store.put(state(2 * MIB, seed=10))
    encoded: list[Manifest] = []
    real = Manifest.to_json
    monkeypatch.setattr(Manifest, "to_json", lambda self: encoded.append(self) or real(self))
    put = store.put(change_one_percent(state(2 * MIB, seed=10), seed=11), parent=first.manifest)
    parent_encodings = sum(m is first.manifest for m in encoded)
    assert (parent_encodings, len(encoded)) == (0, 2), f"{len(encoded)} encodings, {parent_encodings} of the parent"
    assert put.manifest.parent == first.manifest.digest


def test_a_state_changed_near_its_end_hashes_little_more_than_its_tail(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-state hash resumes after the prefix the last state shares (SHA-256's
    running state is kept every MiB), and unchanged chunks are compared, not hashed."""
    store = LocalBlobStore(tmp_path)
    data = state(8 * MIB, seed=12)
    first = store.put(data)
    changed = data[:-MIB // 2] + state(MIB // 2 + 1000, seed=13)  # the last half MiB replaced, and grown
    hashed = HashedBytes(monkeypatch)
    put = store.put(changed, parent=first.manifest)
    size = len(changed)
    assert hashed.total < 0.4 * size, f"hashed {hashed.total} bytes for a {size}-byte state"
    monkeypatch.undo()
    assert_digests_true(store, put.uri, changed)


@pytest.mark.parametrize("edit", ["none", "first byte", "middle", "last byte", "append", "truncate to 3 MiB",
                                  "truncate to 100 bytes", "empty"])
def test_the_recorded_sha256_is_the_states_after_any_edit(tmp_path: Path, edit: str) -> None:
    store = LocalBlobStore(tmp_path)
    data = state(5 * MIB + 123, seed=14)
    store.put(data)
    changed = {"none": data, "first byte": b"\0" + data[1:], "middle": data[:2 * MIB] + b"\0" + data[2 * MIB + 1:],
               "last byte": data[:-1] + b"\0", "append": data + b"tail", "truncate to 3 MiB": data[:3 * MIB],
               "truncate to 100 bytes": data[:100], "empty": b""}[edit]
    put = store.put(changed)
    assert put.sha256 == hashlib.sha256(changed).hexdigest()
    assert LocalBlobStore(tmp_path).get(put.uri) == changed
    again = store.put(data)  # and back: resumed from the edited state's prefixes
    assert again.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("edit", ["near the end", "append", "middle", "insert in the middle",
                                  "delete in the middle"])
def test_the_cuts_of_a_shared_prefix_are_reused_and_the_same_as_a_fresh_chunking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str) -> None:
    """FastCDC starts afresh at each cut: the chunker resumes at the last old cut inside
    the prefix two states share, stops at the first cut at an old cut's place inside
    the suffix they share, and the cut points come out as a full chunking's (the old
    state's last chunk, which ended with the state, is cut again)."""
    store = LocalBlobStore(tmp_path)
    data = state(8 * MIB, seed=15)
    store.put(data)
    at = 4 * MIB + 300_000
    changed = {"near the end": data[:7 * MIB + 300_000] + b"edited" + data[7 * MIB + 300_006:],
               "append": data + state(100_000, seed=16), "middle": data[:at] + b"edited" + data[at + 6:],
               "insert in the middle": data[:at] + b"inserted" + data[at:],
               "delete in the middle": data[:at] + data[at + 100:]}[edit]
    chunked: list[int] = []
    real_bounds = chunking.chunk_bounds

    def bounds(view: Any, **kw: Any) -> list[tuple[int, int]]:
        cut = real_bounds(view, **kw)
        chunked.append(cut[-1][1] if cut else 0)  # the bytes the chunker went through
        return cut
    monkeypatch.setattr(chunking, "chunk_bounds", bounds)
    put = store.put(changed)
    assert chunked and max(chunked) < MIB + chunking.MAX_CHUNK, f"chunked {chunked} bytes of {len(changed)}"
    monkeypatch.undo()
    assert [ref.size for ref in put.manifest.chunks] == [end - start for start, end in real_bounds(changed)]
    assert_digests_true(store, put.uri, changed)


def test_a_state_read_from_a_manifest_cut_another_way_lends_no_cuts(tmp_path: Path) -> None:
    """Only cut points of this version's chunker are reused: a state restored from a
    manifest of another chunker is cut afresh."""
    from agent_client.blobs.layout import chunk_key
    from agent_client.blobs.manifest import ChunkRef, Manifest
    store = LocalBlobStore(tmp_path)
    data = state(3 * MIB, seed=17)
    cuts = [(start, min(start + 100_000, len(data))) for start in range(0, len(data), 100_000)]
    refs = tuple(ChunkRef(hashlib.sha256(data[a:b]).hexdigest(), b - a) for a, b in cuts)
    for ref, (a, b) in zip(refs, cuts):
        store.backend.put(chunk_key(ref.digest, None), data[a:b])
    manifest = Manifest(len(data), hashlib.sha256(data).hexdigest(), refs, "fixed-100000", version=3)
    store.backend.put(f"manifests/{manifest.digest}.json", manifest.to_json())
    restored = store.get(store.backend.uri(f"manifests/{manifest.digest}.json"))
    changed = restored[:-10] + b"0123456789"
    put = store.put(changed, parent=manifest)
    assert [ref.size for ref in put.manifest.chunks] == [b - a for a, b in chunking.chunk_bounds(changed)]
    assert_digests_true(store, put.uri, changed)


@pytest.mark.parametrize("seed", range(12))
def test_after_any_edit_the_cuts_are_a_fresh_chunkings(tmp_path: Path, seed: int) -> None:
    """Reused cuts at both ends never change where a state is cut: random replacements,
    insertions and deletions of random sizes anywhere, against a full chunking."""
    rng = random.Random(seed)
    store = LocalBlobStore(tmp_path)
    data = state(rng.choice([MIB // 2, 3 * MIB, 3 * MIB + 777]), seed=100 + seed)
    for _ in range(3):
        store.put(data)
        at, size = rng.randrange(len(data)), rng.choice([1, 100, 70_000, MIB])
        data = rng.choice([data[:at] + rng.randbytes(size) + data[at + size:], data[:at] + rng.randbytes(size) + data[at:],
                           data[:at] + data[at + size:]])
        put = store.put(data)
        assert [ref.size for ref in put.manifest.chunks] == [b - a for a, b in chunking.chunk_bounds(data)]
        assert_digests_true(store, put.uri, data)
