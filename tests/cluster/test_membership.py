"""Scaling 3 -> 4 -> 3 with dynamic membership, through `raftpoint members`."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, node_status, wait_for
from raftpoint.cli.main import main
from tests.support.cluster import FAST, Client
from tests.support.tls import cli_tls

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_add_then_remove_a_member(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 4, settings=FAST).start_all(count=3) as cluster:
        client = Client(cluster)
        client.create_group()
        client.register("a")
        client.commit("a", 1)
        endpoints = ",".join(n.grpc for n in cluster.nodes[:3])
        new = cluster.start(3, members=[0, 1, 2, 3])
        assert main(["members", "add", new.raft, "--endpoints", endpoints, *cli_tls(cluster)]) == 0
        client.commit("a", 2)
        digest = cluster.converged(60)
        assert new.status().content_digest == digest
        assert main(["members", "remove", new.raft, "--endpoints", endpoints, *cli_tls(cluster)]) == 0
        cluster.stop(3)
        client.commit("a", 3)  # the remaining three still form a majority
        assert client.checkpoints() == [1, 2, 3]
        wait_for(lambda: all(n.status() for n in cluster.nodes[:3]), "the three remaining nodes")


def test_membership_errors_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(tmp_path / "c", 3, settings=FAST).start_all() as cluster:
        cluster.leader()
        endpoints = ",".join(cluster.endpoints())
        assert main(["members", "remove", "127.0.0.1:1", "--endpoints", endpoints, *cli_tls(cluster)]) == 1
        assert "members remove" in capsys.readouterr().err
