"""Metrics are served on their own port and move with the work done; logs are JSON."""
from __future__ import annotations

import json

import grpc
import pytest

from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.support.cluster import Client
from tests.support.metrics import scrape

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_metrics_move_with_writes(cluster: LocalCluster, client: Client) -> None:
    leader = cluster.leader()
    wait_for(lambda: scrape(leader.metrics).get('raftpoint_raft_role{role="leader"}') == 1.0, "the role gauge")
    before = scrape(leader.metrics)
    client.create_group()
    client.register("a")
    for i in range(1, 6):
        client.commit("a", i)
    after = wait_for(lambda: (m := scrape(leader.metrics)) and
                     m.get("raftpoint_applied_index", 0) > before.get("raftpoint_applied_index", 0) and m, "gauges")
    assert after['raftpoint_checkpoints_total{kind="basic"}'] - before.get('raftpoint_checkpoints_total{kind="basic"}', 0) == 5
    key = 'raftpoint_rpc_seconds_count{code="OK",method="CommitCheckpoint"}'
    assert after[key] - before.get(key, 0) == 5
    assert after["raftpoint_apply_seconds_count"] > before.get("raftpoint_apply_seconds_count", 0)
    assert after["raftpoint_journal_fsync_seconds_count"] > before.get("raftpoint_journal_fsync_seconds_count", 0)
    assert after["raftpoint_raft_term"] >= 1


def test_node_logs_are_json_with_request_ids(cluster: LocalCluster, client: Client) -> None:
    leader = cluster.leader()
    client.create_group()
    with pytest.raises(grpc.RpcError):
        client.commit("nobody", 1, rid="traced-request-42")

    def refused() -> list[dict]:
        text = (cluster.root / f"node{leader.index}.log").read_text()
        return [e for e in map(json.loads, filter(lambda line: line.startswith("{"), text.splitlines()))
                if e.get("request_id") == "traced-request-42"]
    [event] = wait_for(refused, "the refused request in the leader's log")
    assert event["event"] == "rpc refused" and event["code"] == "NOT_FOUND" and event["rpc"] == "CommitCheckpoint"
    lines = [line for line in (cluster.root / "node0.log").read_text().splitlines() if line.startswith("{")]
    events = [json.loads(line) for line in lines]
    assert any(e.get("event", "").startswith("node started") and e["level"] == "info" and "timestamp" in e
               for e in events)
