"""A full disk and a slow disk under one node of a 3-node cluster.

Full: the node stops (it cannot store what Raft committed, and pysyncobj cannot undo
half a step), acknowledges nothing it did not store, the others keep serving, and
after the space is freed and it restarts it catches up. Slow: its journal fsyncs
take measurably longer while its writes are throttled and recover when unthrottled,
and the cluster keeps serving and converges.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.disk import unavailable_reason
from coordinator.replication.fail_stop import EXIT_IO_ERROR
from tests.chaos_suite.disk_scenarios import run_in_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow,
              pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))]


@pytest.mark.parametrize("victim", ["follower", "leader"])
def test_a_full_disk_stops_the_node_and_loses_nothing(tmp_path: Path, victim: str) -> None:
    result = run_in_namespace(tmp_path, "disk-full", "--victim", victim)
    assert result["free_bytes_when_full"] < 4096
    assert not result["acked_without_majority"]
    assert result["victim_exit"] == EXIT_IO_ERROR, "\n".join(result["victim_log"])  # the whole tail, not a repr
    # A write into the full disk fails with ENOSPC; an fsync of pages written earlier can
    # fail with EIO instead (the loop device is full too). Either stops the node.
    assert any("No space left on device" in line or "Input/output error" in line
               for line in result["victim_log"]), result["victim_log"]
    assert result["serving_s"] < 20  # 40 writes went through the other two nodes
    assert result["missing"] == [] and result["acked"] >= 50
    assert result["converged_digest"] is not None, result["statuses"]


def test_a_throttled_disk_slows_the_nodes_fsync_and_unthrottle_heals(tmp_path: Path) -> None:
    result = run_in_namespace(tmp_path, "slow-disk")
    normal, throttled, healed = (result["phases"][p] for p in ("normal", "throttled", "healed"))
    # 20 write IOPS: a journal fsync needs at least one write, so about 50 ms.
    assert throttled["fsync_mean_s"] >= 0.025, result["phases"]
    assert throttled["fsync_mean_s"] >= 3 * normal["fsync_mean_s"], result["phases"]
    assert healed["fsync_mean_s"] <= throttled["fsync_mean_s"] / 3, result["phases"]
    assert all(p["writes"] > 0 for p in (normal, throttled, healed))
    assert result["converged_digest"] is not None, result["statuses"]
