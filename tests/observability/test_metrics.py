"""The metrics endpoint serves the node gauges and they follow update_node_gauges."""
from __future__ import annotations

import dataclasses
from typing import Iterator

import pytest

from coordinator.observability import metrics, metrics_server
from coordinator.replication.replica import NodeStatus
from tests.support.metrics import scrape


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = metrics_server.start_metrics_server("127.0.0.1:0")
    host, port = server.server_address[:2]
    yield f"{host}:{port}"
    server.shutdown()
    server.server_close()


def status(**changes: object) -> NodeStatus:
    base = NodeStatus(node="n1", role="follower", term=1, commit_index=10, applied_index=10, raft_applied_index=10,
                      log_entries=10, leader="", has_quorum=True, last_snapshot_index=0, last_snapshot_age_s=-1.0,
                      last_snapshot_bytes=0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_gauges_move_after_update(endpoint: str) -> None:
    metrics.update_node_gauges(status())
    before = scrape(endpoint)
    assert before['raftpoint_raft_role{role="follower"}'] == 1.0
    metrics.update_node_gauges(status(role="leader", term=7, commit_index=1234, applied_index=1230,
                                      last_snapshot_age_s=2.5, last_snapshot_bytes=4096))
    after = scrape(endpoint)
    assert after['raftpoint_raft_role{role="leader"}'] == 1.0
    assert after['raftpoint_raft_role{role="follower"}'] == 0.0
    assert after["raftpoint_raft_term"] == 7
    assert after["raftpoint_raft_commit_index"] == 1234
    assert after["raftpoint_applied_index"] == 1230
    assert after["raftpoint_snapshot_age_seconds"] == 2.5
    assert after["raftpoint_snapshot_bytes"] == 4096


def test_counters_are_exported_before_they_move(endpoint: str) -> None:
    seen = scrape(endpoint)
    for outcome in metrics.EPOCH_OUTCOMES:
        assert f'raftpoint_epochs_total{{outcome="{outcome}"}}' in seen
    assert 'raftpoint_checkpoints_total{kind="forced"}' in seen
    assert "raftpoint_useless_checkpoints_total" in seen


def test_forced_checkpoint_counts_twice(endpoint: str) -> None:
    before = scrape(endpoint)
    metrics.record_checkpoint("forced")
    metrics.record_checkpoint("basic")
    after = scrape(endpoint)
    delta = lambda key: after[key] - before.get(key, 0.0)  # noqa: E731
    assert delta('raftpoint_checkpoints_total{kind="forced"}') == 1
    assert delta('raftpoint_checkpoints_total{kind="basic"}') == 1
    assert delta("raftpoint_forced_checkpoints_total") == 1


def test_histograms_by_label(endpoint: str) -> None:
    metrics.RPC_SECONDS.labels("CommitCheckpoint", "OK").observe(0.002)
    metrics.ROLLBACK_DEPTH.observe(3)
    seen = scrape(endpoint)
    assert seen['raftpoint_rpc_seconds_count{code="OK",method="CommitCheckpoint"}'] >= 1
    assert seen["raftpoint_rollback_intervals_count"] >= 1
