"""A node whose stored data changed at rest refuses to start, says why and how to
rebuild it, and is rebuilt from its peers by the documented step."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from coordinator.harness.local_cluster import LocalCluster, NodeProcess, wait_for
from coordinator.storage.protocol import (EXIT_DAMAGED, JOURNAL_FILE, REBUILT_FROM_PEERS, SNAPSHOT_FILE, STORE_DIR,
                                          TERM_FILE)
from coordinator.storage import lmdb_env
from coordinator.storage.record_seal import seal, unseal
from raftpoint.cli import main as cli
from tests.support.cluster import FAST, Client
from tests.support.metrics import scrape

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


def refused_then_rebuilt(cluster: LocalCluster, client: Client, node: NodeProcess, writes: int, why: str,
                         capsys: pytest.CaptureFixture, after_exit: Callable[[], None] = lambda: None) -> None:
    """Started on its damaged data, the node stops with EXIT_DAMAGED saying `why` and how to
    repair; after the documented repair it rebuilds from its peers, and nothing acknowledged is lost."""
    cluster.start(node.index)
    assert exit_code(node) == EXIT_DAMAGED
    after_exit()
    log = (cluster.root / f"node{node.index}.log").read_text()
    assert why in log and "Rebuild this node from its peers" in log and "raftpoint repair --from-peers" in log

    assert cli.main(["repair", "--from-peers", "--data-dir", str(node.data_dir)]) == 0
    assert "rebuilds from its peers" in capsys.readouterr().out
    assert not any((node.data_dir / name).exists() for name in REBUILT_FROM_PEERS)
    assert (node.data_dir / TERM_FILE).exists()
    cluster.start(node.index)
    digest = cluster.converged(60)
    status = node.status()
    assert status is not None and status.content_digest == digest
    assert client.checkpoints() == list(range(1, writes + 1))


def test_a_bit_flip_in_the_middle_of_a_journal_stops_the_node_until_it_is_rebuilt(
        cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture) -> None:
    follower = stopped_follower(cluster, client, 40)
    journal = follower.data_dir / JOURNAL_FILE
    data = bytearray(journal.read_bytes())
    data[len(data) // 2] ^= 0x04
    journal.write_bytes(bytes(data))
    refused_then_rebuilt(cluster, client, follower, 40, "is damaged", capsys)
    assert (follower.data_dir / "damaged-0" / JOURNAL_FILE).read_bytes() == bytes(data)  # left as found


@pytest.mark.parametrize("damage", ["changed", "lost with the store"])
def test_a_changed_or_lost_snapshot_is_refused_at_the_start_not_run_on(tmp_path: Path, damage: str,
                                                                       capsys: pytest.CaptureFixture) -> None:
    settings = {**FAST, "compaction_min_entries": 20, "compaction_min_time": 0.2}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        client = Client(cluster)
        follower = stopped_follower(cluster, client, 80)
        snapshot = follower.data_dir / SNAPSHOT_FILE
        assert snapshot.exists(), "the follower never compacted"
        if damage == "changed":
            data = bytearray(snapshot.read_bytes())
            data[-200] ^= 0x01  # inside the store image
            snapshot.write_bytes(bytes(data))
            refused_then_rebuilt(cluster, client, follower, 80, "does not match its MAC", capsys)
        else:  # nothing left to rebuild the state from but a compacted journal
            snapshot.unlink()
            shutil.rmtree(follower.data_dir / STORE_DIR)
            refused_then_rebuilt(cluster, client, follower, 80, "entries in between are gone", capsys)


def test_a_changed_value_in_a_stopped_nodes_store_is_refused_at_its_start(
        cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture) -> None:
    follower = stopped_follower(cluster, client, 20)
    data_file = follower.data_dir / STORE_DIR / "data.mdb"
    data = data_file.read_bytes()
    marker = b"file:///blobs/a/17"
    assert marker in data
    data_file.write_bytes(data.replace(marker, b"file:///blobs/a/71"))  # every copy, live or free page
    refused_then_rebuilt(cluster, client, follower, 20, "does not match its checksum", capsys)


def test_a_node_whose_store_disagrees_with_the_majority_stops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A value changed and sealed again (no checksum can tell): only the digest comparison can."""
    with LocalCluster(tmp_path / "c", 3, settings={**FAST, "digest_audit_s": 0.5}).start_all() as cluster:
        client = Client(cluster)
        follower = stopped_follower(cluster, client, 20)
        env = lmdb_env.open_env(follower.data_dir / STORE_DIR, map_size=1 << 30)
        with env.begin(write=True) as txn:
            data = env.open_db(b"data", txn=txn)
            key, value = next((k, unseal(k, v, "test")) for k, v in txn.cursor(db=data) if b"blobs/a/17" in v)
            txn.put(key, seal(key, value.replace(b"blobs/a/17", b"blobs/a/71")), db=data)
        env.close()
        survivor = next(n for n in cluster.nodes if n.index != follower.index)

        def survivors_report_it() -> None:  # the stopped node's own metric went with it
            wait_for(lambda: scrape(survivor.metrics).get("raftpoint_digest_diverged_peers") == 1,
                     "a surviving node's raftpoint_digest_diverged_peers to name the stopped node", 20)

        refused_then_rebuilt(cluster, client, follower, 20, "diverged from the cluster's", capsys, survivors_report_it)
