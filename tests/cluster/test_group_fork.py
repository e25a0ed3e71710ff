"""Forks on a running three-node cluster, with real agents: `raftpoint restore G
--savepoint S --into NEW` creates NEW beside G, NEW's agents register and resume
exactly the savepoint's states while G's go on, and garbage collection of either
group with its blob store leaves the other's checkpoints readable (their chunks are
shared; each group names manifests of its own); a coordinated fork's epochs go on
from the savepoint's."""
from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from agent_client import checkpoint_blob, group_fork
from agent_client.agent import AgentClient
from agent_client.blobs.layout import MANIFESTS
from agent_client.blobstore import LocalBlobStore
from agent_client.connection import Connection
from agent_client.restore_check import load_verified
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import data_uris
from coordinator.harness.local_cluster import LocalCluster
from raftpoint.cli.main import main as raftpoint
from tests.cluster.test_group_restore import OPEN, agent
from tests.support.cluster import Client
from tests.support.tls import cli_tls

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
Capture = pytest.CaptureFixture[str]


@pytest.fixture(autouse=True)
def close_agents() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def big(seed: int) -> bytes:
    """A state of several chunks, so later states that extend it share most of them."""
    return random.Random(seed).randbytes(300_000)


def checkpoints(client: Client, group: str) -> dict[tuple[str, int], pb.CheckpointMeta]:
    answer = client.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group=group))
    return {(m.agent_id, m.index): m for m in answer.checkpoints}


def read_back(blobs: Path, metas: Iterable[pb.CheckpointMeta]) -> dict[tuple[str, int], bytes]:
    """Each checkpoint's state as an agent restores it (its digest and schema checked)."""
    store = LocalBlobStore(blobs)
    return {(m.agent_id, m.index): checkpoint_blob.unpack(load_verified(
        store, m, expected_schema=1, expected_config_hash=m.config_hash), expected_schema=1)[1] for m in metas}


def test_a_fork_resumes_the_savepoint_beside_the_original_and_survives_either_groups_gc(
        shared_cluster: LocalCluster, shared_client: Client, tmp_path: Path, capsys: Capture) -> None:
    blobs = tmp_path / "blobs"
    where = ["--endpoints", ",".join(shared_cluster.endpoints()), *cli_tls(shared_cluster)]
    shared_client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg-fk", spec=pb.GroupSpec(
        group="fk", mode=pb.CIC_BCS, lease_ttl_s=3600, retention=0)))
    a, b = agent(shared_cluster, blobs, "fk", "a"), agent(shared_cluster, blobs, "fk", "b")
    saved = {"a": big(1), "b": big(2)}
    a.checkpoint(b"a at 1")
    assert b.unwrap(a.wrap(b"m1", to="b")) == b"m1"
    a.checkpoint(saved["a"])
    b.checkpoint(saved["b"])
    shared_client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id="sp-fk", group="fk", name="s"))
    assert b.unwrap(a.wrap(b"m2 after the savepoint", to="b")) == b"m2 after the savepoint"
    a.checkpoint(b"a at 3")

    assert raftpoint(["restore", "fk", "--savepoint", "s", "--into", "fk2", *where]) == 2
    assert "--into needs --blob-store" in capsys.readouterr().err
    manifests = sorted(LocalBlobStore(blobs).backend.keys(MANIFESTS))
    assert raftpoint(["restore", "fk", "--savepoint", "nope", "--into", "fk2", "--blob-store", str(blobs),
                      *where]) == 1
    assert "savepoint 'nope'" in capsys.readouterr().err
    assert raftpoint(["restore", "fk", "--savepoint", "s", "--into", "fk2", "--blob-store", str(blobs), "--dry-run",
                      *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dry run: forking group fk at savepoint s into fk2") and [
        line.split()[:2] for line in out[2:]] == [["a", "2"], ["b", "2"]], out
    assert sorted(LocalBlobStore(blobs).backend.keys(MANIFESTS)) == manifests  # nothing copied
    assert raftpoint(["restore", "fk", "--savepoint", "s", "--into", "fk2", "--blob-store", str(blobs), *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("group fk2 forked from group fk at savepoint s"), out
    assert [line.split()[:2] for line in out[2:]] == [["a", "2"], ["b", "2"]], out
    assert raftpoint(["restore", "fk", "--savepoint", "s", "--into", "fk2", "--blob-store", str(blobs), *where]) == 1
    assert "group 'fk2' exists already" in capsys.readouterr().err
    assert len(sorted(LocalBlobStore(blobs).backend.keys(MANIFESTS))) == len(manifests) + 2  # the refusal's copies went

    listed = shared_client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="fk2")).agents
    assert [(m.agent_id, m.state, m.incarnation, m.last_checkpoint_index) for m in listed] == [
        ("a", pb.AGENT_FAILED, 0, 2), ("b", pb.AGENT_FAILED, 0, 2)], listed  # listed, not running

    # The fork's agents register and resume the savepoint's states; the original goes on.
    fa, fb = agent(shared_cluster, blobs, "fk2", "a"), agent(shared_cluster, blobs, "fk2", "b")
    restored = {name: client.restore() for name, client in (("a", fa), ("b", fb))}
    assert {n: (r.index, r.state) for n, r in restored.items()} == {n: (2, saved[n]) for n in "ab"}, restored
    assert fb.unwrap(fa.wrap(b"in the fork", to="b")) == b"in the fork"
    assert fa.checkpoint(saved["a"] + b" and on in the fork") == 3
    b.checkpoint(b"b at 3")
    assert a.unwrap(b.wrap(b"in the original", to="a")) == b"in the original"
    later = {"a": saved["a"] + b" and on in the original", "b": saved["b"] + b" and on in the original"}
    a.checkpoint(later["a"])
    b.checkpoint(later["b"])

    # The source's collection deletes its own manifests of the savepoint's checkpoints, not the fork's copies.
    shared_client.call("AdminService", "DeleteSavepoint", pb.DeleteSavepointRequest(
        request_id="dsp-fk", group="fk", name="s"))
    source = checkpoints(shared_client, "fk")
    assert raftpoint(["gc", "--blob-store", str(blobs), "--group", "fk", "--grace", "0", *where]) == 0
    collected = set(source) - set(checkpoints(shared_client, "fk"))
    assert {("a", 2), ("b", 2)} <= collected, capsys.readouterr()
    store = LocalBlobStore(blobs)
    stored_as_blobs = [k for k in collected if not data_uris.is_inline(source[k].blob_uri)]  # small ones go inline
    assert {("a", 2), ("b", 2)} <= set(stored_as_blobs), {k: source[k].blob_uri[:40] for k in collected}
    assert not any(store.backend.exists(store.backend.key_for_uri(source[k].blob_uri)) for k in stored_as_blobs)
    fork = checkpoints(shared_client, "fk2")
    assert read_back(blobs, fork.values()) == {("a", 2): saved["a"], ("b", 2): saved["b"],
                                            ("a", 3): saved["a"] + b" and on in the fork"}

    # And the fork's collection leaves the source's checkpoints, which share chunks with its copies.
    for client, name in ((fa, "a"), (fb, "b")):
        client.checkpoint(f"{name} later in the fork".encode())
        client.checkpoint(f"{name} even later in the fork".encode())
    assert raftpoint(["gc", "--blob-store", str(blobs), "--group", "fk2", "--grace", "0", *where]) == 0
    assert not {("a", 2), ("b", 2)} & set(checkpoints(shared_client, "fk2")), capsys.readouterr()
    kept = checkpoints(shared_client, "fk")
    assert read_back(blobs, [kept[("a", 4)], kept[("b", 4)]]) == {("a", 4): later["a"], ("b", 4): later["b"]}


def test_a_coordinated_fork_goes_on_from_the_savepoints_epoch(shared_cluster: LocalCluster, shared_client: Client,
                                                             tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    shared_client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg-fkc", spec=pb.GroupSpec(
        group="fkc", mode=pb.COORDINATED, lease_ttl_s=3600, epoch_timeout_s=3600)))
    a, b = agent(shared_cluster, blobs, "fkc", "a"), agent(shared_cluster, blobs, "fkc", "b")

    def epoch(group: str, agents: dict[str, AgentClient], states: dict[str, bytes]) -> int:
        number = shared_client.call("AdminService", "StartEpoch", pb.StartEpochRequest(
            request_id=f"se-{uuid.uuid4().hex}", group=group)).epoch.epoch
        for name, client in agents.items():
            client.checkpoint(states[name], epoch=number)
        return number

    assert epoch("fkc", {"a": a, "b": b}, {"a": b"a in epoch 1", "b": b"b in epoch 1"}) == 1
    shared_client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id="sp-fkc", group="fkc", name="s"))
    assert epoch("fkc", {"a": a, "b": b}, {"a": b"a in epoch 2", "b": b"b in epoch 2"}) == 2
    with Connection(shared_cluster.endpoints(), token=shared_cluster.token, tls=shared_cluster.client_tls()) as conn:
        group_fork.fork(conn, LocalBlobStore(blobs), "fkc", "s", "fkc2")
    fa, fb = agent(shared_cluster, blobs, "fkc2", "a"), agent(shared_cluster, blobs, "fkc2", "b")
    assert [(r.index, r.state) for r in (fa.restore(), fb.restore())] == [(1, b"a in epoch 1"), (1, b"b in epoch 1")]
    assert epoch("fkc2", {"a": fa, "b": fb}, {"a": b"a forked", "b": b"b forked"}) == 2
    fork_group = shared_client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="fkc2")).group
    assert fork_group.stable_epoch == 2 and checkpoints(shared_client, "fkc2").keys() == {
        ("a", 1), ("b", 1), ("a", 2), ("b", 2)}
    assert read_back(blobs, [checkpoints(shared_client, "fkc2")[("a", 2)]]) == {("a", 2): b"a forked"}
    assert epoch("fkc", {"a": a, "b": b}, {"a": b"a in epoch 3", "b": b"b in epoch 3"}) == 3  # the original goes on
    assert read_back(blobs, [checkpoints(shared_client, "fkc")[("a", 2)]]) == {("a", 2): b"a in epoch 2"}
