"""`raftpoint retention` on a real three-node cluster: a policy set through the leader
outlives it, refusals are one line that change nothing, and `raftpoint gc` keeps what
the policy selects while deleting the other released checkpoints' blobs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.blobs.layout import MANIFESTS
from agent_client.blobstore import open_blob_store
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import Client
from tests.support.tls import cli_tls

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
Capture = pytest.CaptureFixture[str]
POLICY = {"group": "g", "keep_last": 3, "bucket_seconds": 86_400.0, "buckets": 1}


def refused(capsys: Capture, *parts: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(p in err for p in parts), err


def shown(capsys: Capture, where: list[str]) -> dict:
    assert raftpoint(["retention", "show", "g", "--json", *where]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_policy_survives_a_leader_kill_and_gc_applies_it(cluster: LocalCluster, client: Client, tmp_path: Path,
                                                           capsys: Capture) -> None:
    client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        group="g", mode=pb.UNCOORDINATED, retention=0, lease_ttl_s=3600.0)))
    where = ["--endpoints", ",".join(cluster.endpoints()), *cli_tls(cluster)]
    assert raftpoint(["retention", "set", "g", "--keep-last", "3", "--keep-every", "1d", "--buckets", "1",
                      *where]) == 0
    assert "the newest 3 stable checkpoints per agent" in capsys.readouterr().out
    for bad, code, parts in ((["--keep-last", "-1"], 1, ("INVALID_ARGUMENT", "policy.keep_last")),
                             (["--keep-every", "1h"], 1, ("INVALID_ARGUMENT", "policy.buckets")),
                             (["--keep-every", "soon", "--buckets", "2"], 2, ("--keep-every 'soon'",))):
        assert raftpoint(["retention", "set", "g", *bad, *where]) == code, bad
        refused(capsys, *parts)
    assert shown(capsys, where) == POLICY
    assert raftpoint(["retention", "show", "nope", *where]) == 1
    refused(capsys, "NOT_FOUND", "'nope'")

    cluster.kill(cluster.leader().index)
    cluster.leader()
    assert shown(capsys, where) == POLICY

    blobs = tmp_path / "blobs"
    with AgentClient("g", "a", cluster.endpoints(), blobs, token=cluster.token, tls=cluster.client_tls(),
                     snapshot=lambda: b"state", background=False, inline_max_bytes=0) as agent:  # blobs to delete
        agent.register()
        for _ in range(5):
            agent.checkpoint()
    assert client.checkpoints() == [1, 2, 3, 4, 5]
    # Retention 0 puts the line at 5; the policy keeps 3 and 4 as well (the day's newest is 5).
    assert raftpoint(["gc", "--blob-store", str(blobs), "--group", "g", "--grace", "0", *where]) == 0
    assert "group g: the coordinator released 2 checkpoints" in capsys.readouterr().out
    assert client.checkpoints() == [3, 4, 5]
    assert len(list(open_blob_store(str(blobs)).backend.keys(MANIFESTS))) == 3

    assert raftpoint(["retention", "set", "g", "--keep-last", "0", *where]) == 0
    assert "hold: nothing" in capsys.readouterr().out
    assert raftpoint(["gc", "--blob-store", str(blobs), "--group", "g", "--grace", "0", *where]) == 0
    assert "released 2 checkpoints" in capsys.readouterr().out
    assert client.checkpoints() == [5]
