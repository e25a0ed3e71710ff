"""Guarantees under crashes, on a fresh 3-process cluster each: kill -9 of the leader or a
follower, restart, catch-up, and restore from our snapshot after log compaction."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, wait_for
from coordinator.replication import snapshot_file
from tests.support.cluster import FAST, Client

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_leader_kill_loses_no_acknowledged_write(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    acked = [i for i in range(1, 21) if client.commit("a", i)]
    old = cluster.leader()
    cluster.kill(old.index)
    started = time.monotonic()
    client.commit("a", 21)  # retried until a new leader accepts it
    failover = time.monotonic() - started
    new = cluster.leader()
    assert new.index != old.index
    assert client.checkpoints() == acked + [21]
    assert failover < 10, failover
    cluster.start(old.index)
    cluster.converged()


@pytest.mark.slow
def test_killed_follower_restarts_and_catches_up(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    follower = next(n for n in cluster.nodes if n.index != cluster.leader().index)
    cluster.kill(follower.index)
    for i in range(1, 31):
        client.commit("a", i)
    cluster.start(follower.index)
    digest = cluster.converged()
    assert follower.status().content_digest == digest


@pytest.mark.slow
def test_restart_after_compaction_restores_from_our_snapshot(tmp_path: Path) -> None:
    settings = {**FAST, "compaction_min_entries": 50, "compaction_min_time": 0.5}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        client = Client(cluster)
        client.create_group()
        client.register("a")
        follower = next(n for n in cluster.nodes if n.index != cluster.leader().index)
        cluster.kill(follower.index)
        writes = 200
        for i in range(1, writes + 1):
            client.commit("a", i)
        leader = cluster.leader()
        wait_for(lambda: (s := leader.status()) is not None and s.last_snapshot_index > 100,
                 "the leader to compact")
        assert leader.status().log_entries < writes
        cluster.start(follower.index)
        digest = cluster.converged(60)
        assert follower.status().content_digest == digest
        snapshot = follower.data_dir / "raft.snapshot"
        with open(snapshot, "rb") as f:
            assert f.read(len(snapshot_file.MAGIC)) == b"RPSNAP\x00\x01"
            f.seek(0)
            assert snapshot_file.read_header(f).applied_index > 100
        assert follower.status().log_entries < writes
        assert client.checkpoints() == list(range(1, writes + 1))
        # A crash now: the follower comes back from its own snapshot file plus journal.
        cluster.restart(follower.index)
        assert cluster.converged(60) == digest
        assert client.checkpoints() == list(range(1, writes + 1))
