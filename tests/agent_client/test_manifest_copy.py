"""A copy of a checkpoint's manifest (what a fork reads from): the same state under a
name of its own, so deleting either manifest, chunk sweep included, leaves the other
readable; made without the AEAD key; the same copy name gives the same URI."""
from __future__ import annotations

import random
from pathlib import Path

from agent_client.blobs.layout import CHUNKS, MANIFESTS
from agent_client.blobstore import LocalBlobStore


def _state(seed: int) -> bytes:
    return random.Random(seed).randbytes(400_000)


def test_either_of_a_manifest_and_its_copy_survives_the_deletion_of_the_other(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = _state(1)
    original = store.put(data).uri
    copy = store.copy_manifest(original, "fork f")
    assert copy != original and store.get(copy) == data
    assert store.copy_manifest(original, "fork f") == copy  # a retry makes no second copy
    chunks = set(store.backend.keys(CHUNKS))
    store.delete_checkpoints([original], grace_s=0)
    assert store.get(copy) == data and set(store.backend.keys(CHUNKS)) == chunks
    second = store.copy_manifest(copy, "fork of the fork")
    store.delete_checkpoints([copy], grace_s=0)
    assert store.get(second) == data
    store.delete_checkpoints([second], grace_s=0)
    assert not list(store.backend.keys(MANIFESTS)) and not list(store.backend.keys(CHUNKS))


def test_an_encrypted_checkpoint_is_copied_without_its_key(tmp_path: Path) -> None:
    key = bytes(range(32))
    data = _state(2)
    original = LocalBlobStore(tmp_path, key=key).put(data).uri
    copy = LocalBlobStore(tmp_path).copy_manifest(original, "fork f")
    assert LocalBlobStore(tmp_path, key=key).get(copy) == data


def test_a_manifest_that_is_no_copy_keeps_its_bytes(tmp_path: Path) -> None:
    """Manifests written before copies existed are named by bytes without the field."""
    store = LocalBlobStore(tmp_path)
    put = store.put(_state(3))
    assert b'"copy"' not in put.manifest.to_json()
    assert store.manifest(put.uri) == put.manifest
