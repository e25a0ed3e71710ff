"""A node whose stored data changed at rest refuses to start, says why and how to
rebuild it, and is rebuilt from its peers by the documented step."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, NodeProcess, node_status
from coordinator.storage.protocol import EXIT_DAMAGED, REBUILT_FROM_PEERS
from tests.support.cluster import FAST, Client

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def stopped_follower(cluster: LocalCluster, client: Client, writes: int) -> NodeProcess:
    """Every write acknowledged, then one follower stopped cleanly (its commit index stored)."""
    client.create_group()
    client.register("a")
    for i in range(1, writes + 1):
        client.commit("a", i)
    follower = next(n for n in cluster.nodes if n.index != cluster.leader().index)
    cluster.converged()
    cluster.stop(follower.index)
    return follower


def exit_code(node: NodeProcess, timeout: float = 30.0) -> int | None:
    assert node.process is not None
    try:
        return node.process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def rebuild_from_peers(node: NodeProcess) -> None:
    """The documented repair: everything but the term and vote moved out of the data dir."""
    aside = node.data_dir.parent / f"{node.data_dir.name}.damaged"
    aside.mkdir()
    for name in REBUILT_FROM_PEERS:
        if (node.data_dir / name).exists():
            shutil.move(str(node.data_dir / name), str(aside / name))


def test_a_bit_flip_in_the_middle_of_a_journal_stops_the_node_until_it_is_rebuilt(
        cluster: LocalCluster, client: Client) -> None:
    follower = stopped_follower(cluster, client, 40)
    journal = follower.data_dir / "raft.journal"
    data = bytearray(journal.read_bytes())
    data[len(data) // 2] ^= 0x04
    journal.write_bytes(bytes(data))
    cluster.start(follower.index)
    assert exit_code(follower) == EXIT_DAMAGED
    log = (cluster.root / f"node{follower.index}.log").read_text()
    assert "is damaged" in log and "Rebuild this node from its peers" in log
    assert journal.read_bytes() == bytes(data)  # left as found

    rebuild_from_peers(follower)
    cluster.start(follower.index)
    digest = cluster.converged(60)
    status = node_status(follower.grpc)
    assert status is not None and status.content_digest == digest
    assert client.checkpoints() == list(range(1, 41))


def test_a_changed_snapshot_file_is_refused_at_the_start_not_installed(tmp_path: Path) -> None:
    settings = {**FAST, "compaction_min_entries": 20, "compaction_min_time": 0.2}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        client = Client(cluster)
        follower = stopped_follower(cluster, client, 80)
        snapshot = follower.data_dir / "raft.snapshot"
        assert snapshot.exists(), "the follower never compacted"
        data = bytearray(snapshot.read_bytes())
        data[-200] ^= 0x01  # inside the store image
        snapshot.write_bytes(bytes(data))
        cluster.start(follower.index)
        assert exit_code(follower) == EXIT_DAMAGED
        log = (cluster.root / f"node{follower.index}.log").read_text()
        assert "does not match its MAC" in log and "Rebuild this node from its peers" in log

        rebuild_from_peers(follower)
        cluster.start(follower.index)
        digest = cluster.converged(60)
        status = node_status(follower.grpc)
        assert status is not None and status.content_digest == digest
        assert client.checkpoints() == list(range(1, 81))


def test_a_changed_value_in_a_stopped_nodes_store_is_refused_at_its_start(
        cluster: LocalCluster, client: Client) -> None:
    follower = stopped_follower(cluster, client, 20)
    data_file = follower.data_dir / "state" / "data.mdb"
    data = data_file.read_bytes()
    marker = b"file:///blobs/a/17"
    assert marker in data
    data_file.write_bytes(data.replace(marker, b"file:///blobs/a/71"))  # every copy, live or free page
    cluster.start(follower.index)
    assert exit_code(follower) == EXIT_DAMAGED
    log = (cluster.root / f"node{follower.index}.log").read_text()
    assert "does not match its checksum" in log and "Rebuild this node from its peers" in log
