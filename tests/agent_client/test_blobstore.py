from __future__ import annotations

import base64
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.blobstore import BlobCorrupted, BlobMissing, LocalBlobStore, aead_key_from_env


def state(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def test_round_trip_and_digest(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = state(300_000)
    put = store.put(data)
    assert put.size == len(data) and put.chunks_total == 5 and put.chunks_new == 5
    assert store.get(put.uri) == data
    assert store.put(data).chunks_new == 0  # identical state: nothing but the manifest again


def test_incremental_checkpoint_writes_only_changed_chunks(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = bytearray(state(4 * 1024 * 1024))
    store.put(bytes(data))
    rng = random.Random(2)
    start = rng.randrange(0, len(data) - 42_000)
    data[start:start + 41_943] = rng.randbytes(41_943)  # 1% of the bytes, in place
    put = store.put(bytes(data))
    assert put.bytes_written < 0.05 * len(data), put
    assert store.get(put.uri) == bytes(data)


def test_corruption_and_loss_are_named(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    put = store.put(state(200_000))
    victim = next((tmp_path / "chunks").rglob("*"))
    while victim.is_dir():
        victim = next(victim.iterdir())
    raw = bytearray(victim.read_bytes())
    raw[0] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(BlobCorrupted, match=victim.name):
        store.get(put.uri)
    with pytest.raises(BlobMissing):
        store.get((tmp_path / "manifests" / ("0" * 64 + ".json")).as_uri())
    with pytest.raises(BlobMissing, match="not a manifest"):
        store.get("file:///etc/passwd")


def test_aead_round_trip_and_wrong_key(tmp_path: Path) -> None:
    key = os.urandom(32)
    store = LocalBlobStore(tmp_path, key=key)
    data = state(150_000)
    put = store.put(data)
    assert data[:64] not in b"".join(p.read_bytes() for p in (tmp_path / "chunks").rglob("*") if p.is_file())
    assert store.get(put.uri) == data
    with pytest.raises(BlobCorrupted, match="decryption failed"):
        LocalBlobStore(tmp_path, key=os.urandom(32)).get(put.uri)
    with pytest.raises(BlobCorrupted, match="no AEAD key"):
        LocalBlobStore(tmp_path).get(put.uri)


def test_aead_key_from_environment(tmp_path: Path) -> None:
    key = os.urandom(32)
    secret = tmp_path / "aead-key"
    secret.write_text(base64.b64encode(key).decode())
    assert aead_key_from_env({"RAFTPOINT_AEAD_KEY_FILE": str(secret)}) == key
    assert aead_key_from_env({}) is None
    with pytest.raises(ValueError, match="32 bytes"):
        aead_key_from_env({"RAFTPOINT_AEAD_KEY": base64.b64encode(b"short").decode()})


def test_garbage_collection_keeps_shared_chunks(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    a = bytearray(state(256 * 1024))
    first = store.put(bytes(a))
    a[:10] = b"x" * 10
    second = store.put(bytes(a))
    store.delete(first.uri)
    assert store.collect_garbage() == 1  # only the chunk the first state alone used
    assert store.get(second.uri) == bytes(a)


def test_agent_client_never_imports_pysyncobj_or_lmdb() -> None:
    code = ("import sys, agent_client.blobstore, agent_client.connection; "
            "bad = {'pysyncobj', 'lmdb'} & set(sys.modules); print(sorted(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
