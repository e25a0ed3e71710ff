"""Small states travel inside the commit as data: URIs: no file, no sync, no request to
the store; they come back on restore, in a fork and through the restore checks, and
garbage collection has nothing to delete for them."""
from __future__ import annotations

import base64
import os
import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent_client import connect, group_fork
from agent_client.blobs.store import DEFAULT_INLINE_MAX_BYTES
from agent_client.blobstore import BlobCorrupted, LocalBlobStore
from agent_client.connection import Rejected
from agent_client.restore_check import CheckpointRejected, RejectReason, load_verified
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import data_uris
from raftpoint.cli.main import main as raftpoint
from tests.support.tls import cli_tls


def state(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


class Untouchable:
    """A backend every use of which fails the test: a state held inline needs none."""

    location = "untouchable"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the backend was used: {name}")


def test_a_small_state_writes_no_file_and_reads_back(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    small = state(1024)
    put = store.put([small[:100], small[100:]])
    assert put.uri.startswith("data:") and put.bytes_written == 0 and put.manifest is None, put
    assert files_under(tmp_path / "blobs") == [], files_under(tmp_path / "blobs")
    assert LocalBlobStore(tmp_path / "other").get(put.uri) == small  # any store reads it


def test_one_byte_over_the_threshold_goes_to_the_store(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path, inline_max_bytes=1000)
    assert store.put(state(1000)).uri.startswith("data:")
    over = store.put(state(1001))
    assert over.uri.startswith("file://") and len(files_under(tmp_path / "manifests")) == 1, over.uri
    assert store.get(over.uri) == state(1001)
    assert not LocalBlobStore(tmp_path, inline_max_bytes=0).put(state(10)).uri.startswith("data:")


def test_no_backend_request_reads_copies_or_deletes_a_state_held_inline() -> None:
    store = LocalBlobStore(backend=Untouchable())  # type: ignore[arg-type]
    put = store.put(b"tiny state")
    assert store.holds(put.uri) and store.get(put.uri) == b"tiny state"
    assert store.copy_manifest(put.uri, "fork f 1") == put.uri
    store.delete(put.uri)
    assert store.get(put.uri) == b"tiny state"


def test_an_encrypting_store_never_puts_a_state_in_clear_into_the_commit(tmp_path: Path) -> None:
    sealed = LocalBlobStore(tmp_path, key=os.urandom(32))
    put = sealed.put(b"secret")
    assert put.uri.startswith("file://") and sealed.get(put.uri) == b"secret"


def test_a_threshold_beyond_the_coordinators_cap_is_refused(tmp_path: Path) -> None:
    for bad in (-1, data_uris.MAX_INLINE_BYTES + 1):
        with pytest.raises(ValueError, match="inline_max_bytes must be between 0 and 8192"):
            LocalBlobStore(tmp_path, inline_max_bytes=bad)
    assert 0 < DEFAULT_INLINE_MAX_BYTES <= data_uris.MAX_INLINE_BYTES


def test_a_damaged_data_uri_is_refused_on_read_and_by_the_restore_check(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    put = store.put(b"the state as written")
    other = data_uris.encode(b"another state", put.sha256)  # names the first state's digest
    with pytest.raises(BlobCorrupted, match="do not match the SHA-256 it names"):
        store.get(other)
    with pytest.raises(BlobCorrupted, match="not valid base64"):
        store.get(put.uri + "!")
    unnamed = "data:application/octet-stream;base64," + base64.b64encode(b"another state").decode()  # no sha256
    meta = pb.CheckpointMeta(blob_uri=unnamed, sha256=put.sha256, schema_version=1, config_hash="c")
    with pytest.raises(CheckpointRejected) as rejected:
        load_verified(store, meta, expected_schema=1, expected_config_hash="c")
    assert rejected.value.reason is RejectReason.DIGEST_MISMATCH, rejected.value
    assert "data: (13 bytes inline) has SHA-256" in str(rejected.value), rejected.value  # not its base64


def test_a_commit_whose_data_uri_is_not_its_state_is_refused_over_grpc(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator, connect(coordinator.address, data_dir=tmp_path,
                                                        tls=coordinator.client_tls()) as rp:
        rp.group("g", mode="bcs", create=True)
        with rp.group("g").agent("a", state={}, background=False) as me:
            put = LocalBlobStore(tmp_path / "blobs").put(b"the state")
            lie = data_uris.encode(b"another state", put.sha256)
            with pytest.raises(Rejected) as refused:
                rp.conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                    request_id="cp-lie", token=me.client.core.token(),
                    checkpoint=pb.CheckpointMeta(group="g", agent_id="a", index=1, kind=pb.BASIC, blob_uri=lie,
                                                 sha256=put.sha256, size=put.size)))
            assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT, refused.value
            assert refused.value.reason_code == pb.REASON_INVALID_FIELD and "holds" in refused.value.reason
            listed = rp.conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g"))
            assert list(listed.checkpoints) == [], listed


def test_an_agent_restores_and_forks_an_inline_checkpoint_and_gc_deletes_no_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blobs = tmp_path / "blobs"
    with InProcessCoordinator() as coordinator:
        tls, where = coordinator.client_tls(), ["--endpoints", coordinator.address, *cli_tls(coordinator)]
        with connect(coordinator.address, data_dir=tmp_path / "agents", blob_store=LocalBlobStore(blobs),
                     tls=tls) as rp:
            group = rp.group("g", mode="bcs", create=True, retention=1, lease_ttl_s=600)
            with group.agent("a", state={"n": 0}, background=False) as me:
                for n in range(1, 5):
                    me.checkpoint({"n": n})
                capsys.readouterr()
                assert raftpoint(["checkpoints", "g", *where]) == 0
                listing = capsys.readouterr().out
                assert listing.count("data: (") == 4 and "base64" not in listing, listing
                assert raftpoint(["gc", "--blob-store", str(blobs), "--group", "g", *where]) == 0
                out, err = capsys.readouterr()
                assert "released 0 checkpoints stored as blobs" in out and "deleted 0 manifests" in out, out
                assert "--uri" not in err, err
                assert raftpoint(["checkpoints", "g", *where]) == 0
                assert capsys.readouterr().out.count("data: (") == 2, "GC released none of the 4 checkpoints"
            assert files_under(blobs) == [], files_under(blobs)
            with group.agent("a", state={}, background=False) as again:  # a new process resumes
                assert again.state == {"n": 4}, again.state
                group_fork.fork_now(rp.conn, LocalBlobStore(blobs), "g", "f", ["a"])
                with rp.group("f").agent("a", state={}, background=False) as forked:
                    assert forked.state == {"n": 4}, forked.state
    assert files_under(blobs) == [], files_under(blobs)
