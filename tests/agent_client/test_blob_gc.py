"""`raftpoint gc` and agent_client.blob_gc: the coordinator's GarbageCollect answer
turned into deletions, on the S3 store and on a directory."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.blobs.layout import MANIFESTS, PACKS
from agent_client.blobstore import BlobStoreUnavailable, open_blob_store
from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli.main import main as raftpoint
from tests.support.tls import cli_tls


def state(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def run_agent(coordinator: InProcessCoordinator, location: str, tmp_path: Path, group: str) -> None:
    """Four checkpoints with retention 1: GarbageCollect keeps the last and its parent
    (an incremental checkpoint's base) and releases the first two. The client is closed
    (not deregistered): its threads must not outlive the test."""
    with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"cg-{group}", spec=pb.GroupSpec(group=group, mode=pb.CIC_BCS, lease_ttl_s=600, retention=1)))
    live = {"state": b""}
    with AgentClient(group, "a", [coordinator.address], location, tls=coordinator.client_tls(),
                     snapshot=lambda: live["state"], state_dir=tmp_path / group) as agent:
        agent.register()
        for seed in (1, 2, 3, 4):
            live["state"] = state(300_000, seed)
            agent.checkpoint()


def objects(location: str) -> tuple[set[str], set[str]]:
    backend = open_blob_store(location).backend
    return set(backend.keys(MANIFESTS)), set(backend.keys(PACKS))


def test_gc_command_deletes_released_checkpoints_on_s3(s3_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with InProcessCoordinator() as coordinator:
        run_agent(coordinator, s3_url, tmp_path, "g")
        manifests_before, chunks_before = objects(s3_url)
        assert len(manifests_before) == 4
        # Default grace: the released manifests go, their (young) chunks stay.
        assert raftpoint(["gc", "--blob-store", s3_url, "--group", "g", "--endpoints", coordinator.address, *cli_tls(coordinator)]) == 0
        out = capsys.readouterr().out
        assert "group g: the coordinator released 2 checkpoints" in out
        assert "deleted 2 manifests, 0 packs and 0 single-chunk objects" in out
        manifests_after, chunks_after = objects(s3_url)
        assert len(manifests_after) == 2 and chunks_after == chunks_before
        # Grace 0: now the unreferenced chunks go, exactly those.
        assert raftpoint(["gc", "--blob-store", s3_url, "--grace", "0"]) == 0
        assert "deleted 0 manifests" in capsys.readouterr().out
        store = open_blob_store(s3_url)
        live_chunks = {c.key(None) for key in manifests_after
                       for c in store.manifest(store.backend.uri(key)).chunks}
        assert live_chunks < chunks_before
        assert objects(s3_url) == (manifests_after, live_chunks)
        with AgentClient("g", "a", [coordinator.address], s3_url, tls=coordinator.client_tls(), snapshot=lambda: b"",
                         state_dir=tmp_path / "g") as restarted:
            restarted.register()
            assert restarted.restore().state == state(300_000, 4)


def test_gc_library_call_on_a_directory(tmp_path: Path) -> None:
    from agent_client import blob_gc
    location = str(tmp_path / "blobs")
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        run_agent(coordinator, location, tmp_path, "d")
        report = blob_gc.collect(conn, open_blob_store(location), ["d"], grace_s=0)
        assert len(report.released["d"]) == 2 and report.result.manifests_removed == 2
        assert report.result.packs_removed > 0 and report.foreign == []
        assert len(objects(location)[0]) == 2


def test_gc_fails_before_releasing_anything_when_the_store_is_down(tmp_path: Path, s3_url: str) -> None:
    from agent_client import blob_gc
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        run_agent(coordinator, s3_url, tmp_path, "h")
        down = s3_url.split("?")[0] + "?endpoint=http://127.0.0.1:9&connect_timeout=1&retry_timeout=1&max_retries=1"
        with pytest.raises(BlobStoreUnavailable, match="127.0.0.1:9"):
            blob_gc.collect(conn, open_blob_store(down), ["h"], grace_s=0)
        assert len(blob_gc.release(conn, ["h"])["h"]) == 2  # nothing had been released


def test_gc_command_refuses_bad_input_without_changing_anything(tmp_path: Path, s3_url: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert raftpoint(["gc", "--blob-store", "s3://k:secret@bucket/p"]) == 2
    assert "credentials never go in" in capsys.readouterr().err
    assert raftpoint(["gc", "--blob-store", s3_url, "--grace", "-1"]) == 2
    store = open_blob_store(s3_url)
    put = store.put(b"keep me" * 1000)
    assert raftpoint(["gc", "--blob-store", s3_url, "--grace", "0", "--uri", "s3://elsewhere/manifests/x.json"]) == 1
    assert "not a manifest of this blob store" in capsys.readouterr().err
    assert store.get(put.uri) == b"keep me" * 1000
