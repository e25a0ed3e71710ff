from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from agent_client.blobstore import LocalBlobStore
from agent_client.restore_check import CheckpointRejected, RejectReason, load_verified, verify
from agent_client.state_codec import config_hash

CONFIG = config_hash({"model": "m-1"})


@dataclass(frozen=True)
class Meta:
    blob_uri: str
    sha256: str
    schema_version: int = 2
    config_hash: str = CONFIG


def meta_for(data: bytes, uri: str = "file:///x") -> Meta:
    return Meta(uri, hashlib.sha256(data).hexdigest())


def check(meta: Meta, data: bytes | None) -> None:
    verify(meta, data, expected_schema=2, expected_config_hash=CONFIG)


def rejection(meta: Meta, data: bytes | None) -> CheckpointRejected:
    with pytest.raises(CheckpointRejected) as info:
        check(meta, data)
    return info.value


def test_accepts_the_exact_state() -> None:
    check(meta_for(b"state"), b"state")


def test_each_reason_is_named() -> None:
    meta = meta_for(b"state")
    assert rejection(meta, b"other").reason is RejectReason.DIGEST_MISMATCH
    assert rejection(replace(meta, schema_version=1), b"state").reason is RejectReason.SCHEMA_MISMATCH
    assert rejection(replace(meta, config_hash="0" * 64), b"state").reason is RejectReason.CONFIG_MISMATCH
    assert rejection(meta, None).reason is RejectReason.MISSING_BLOB
    assert "schema version mismatch" in str(rejection(replace(meta, schema_version=1), b"state"))


def test_load_verified_maps_blob_store_failures(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = b"agent state " * 10_000
    put = store.put(data)
    meta = Meta(put.uri, put.sha256)
    assert load_verified(store, meta, expected_schema=2, expected_config_hash=CONFIG) == data
    wrong = Meta(put.uri, "f" * 64)  # blob intact but not what the coordinator recorded
    with pytest.raises(CheckpointRejected) as info:
        load_verified(store, wrong, expected_schema=2, expected_config_hash=CONFIG)
    assert info.value.reason is RejectReason.DIGEST_MISMATCH
    pack = next(p for p in (tmp_path / "packs").rglob("*") if p.is_file())
    pack.write_bytes(b"rot" + pack.read_bytes()[3:])
    with pytest.raises(CheckpointRejected) as info:
        load_verified(store, meta, expected_schema=2, expected_config_hash=CONFIG)
    assert info.value.reason is RejectReason.DIGEST_MISMATCH and put.manifest.chunks[0].digest in str(info.value)
    store.delete(put.uri)
    with pytest.raises(CheckpointRejected) as info:
        load_verified(store, meta, expected_schema=2, expected_config_hash=CONFIG)
    assert info.value.reason is RejectReason.MISSING_BLOB
