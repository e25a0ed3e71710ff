"""What a put hashes, and when (agent_client.blobs.digests): the whole state beside the
chunker, and unchanged chunks of the last state not again."""
from __future__ import annotations

import hashlib
import random
import threading
import time
from pathlib import Path
from typing import Any

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
    """hashlib.sha256 replaced by one that counts the bytes it is given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.total = 0
        self._lock = threading.Lock()
        real = hashlib.sha256

        def counting(data: Any = b"", **kw: Any) -> Any:
            with self._lock:
                self.total += memoryview(data).nbytes
            return real(data, **kw)
        monkeypatch.setattr(hashlib, "sha256", counting)


def test_the_whole_state_hash_runs_while_the_state_is_chunked(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator's record (the whole state's SHA-256) does not depend on the cut
    points, so it is under way before the chunker finishes."""
    store = LocalBlobStore(tmp_path)
    data = state(2 * MIB, seed=1)
    whole_started = threading.Event()
    real_sha, real_bounds = hashlib.sha256, chunking.chunk_bounds

    def sha(buf: Any = b"", **kw: Any) -> Any:
        if memoryview(buf).nbytes == len(data):
            whole_started.set()
        return real_sha(buf, **kw)
    seen: list[bool] = []

    def bounds(view: Any, **kw: Any) -> list[tuple[int, int]]:
        seen.append(whole_started.wait(timeout=5))
        return real_bounds(view, **kw)
    monkeypatch.setattr(hashlib, "sha256", sha)
    monkeypatch.setattr(chunking, "chunk_bounds", bounds)
    put = store.put(data)
    assert seen == [True], "the whole-state hash had not started 5 s into chunking"
    assert put.sha256 == real_sha(data).hexdigest()


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
