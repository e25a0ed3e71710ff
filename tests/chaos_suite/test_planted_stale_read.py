"""stale-read: a node that answers reads without the read barrier shows an epoch older than
one already read; the checker's monotonic-epochs invariant catches it, and the same run
without the bug passes (the cut-off node then answers nothing)."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from chaos import checker
from chaos.client import RecordingClient
from chaos.history import History
from chaos.invariants import epochs
from chaos.sampler import await_convergence
from chaos.workloads import metadata_ops as ops
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for
from tests.chaos_suite.clusters import planted_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]


@pytest.mark.parametrize("bug", [None, "stale-read"])
def test_a_read_served_without_the_barrier_goes_back_in_time(tmp_path: Path, bug: str | None) -> None:
    spec = pb.GroupSpec(group="g", mode=pb.COORDINATED, lease_ttl_s=3600, epoch_timeout_s=600)
    with planted_cluster(tmp_path / "cluster", bug) as cluster, History(tmp_path / "history.jsonl") as history:
        cluster.start_all()
        leader = cluster.leader()
        admin = RecordingClient(history, "admin", cluster.endpoints(), deadline=10.0, rpc_timeout=2.0)
        admin.send(ops.create_group("cg", spec))
        admin.send(ops.register("reg", "g", "a"))
        cluster.converged()
        lagging, other = [n for n in cluster.nodes if n is not leader]
        cluster.kill(lagging.index)  # it keeps epoch 0
        assert admin.send(ops.start_epoch("e1", "g")).ok
        assert admin.send(ops.get_group("read-1", "g")).response.group.current_epoch == 1
        for node in (leader, other):  # the lagging node comes back alone: it cannot catch up
            cluster.signal(node.index, signal.SIGSTOP)
        history.fault("pause", nodes=[leader.index, other.index])
        cluster.start(lagging.index)
        wait_for(lambda: lagging.status() is not None, "the restarted node to answer", 30)
        reader = RecordingClient(history, "reader", [lagging.grpc], deadline=2.0, rpc_timeout=1.0)
        reader.send(ops.get_group("read-2", "g"))
        for node in (leader, other):
            cluster.signal(node.index, signal.SIGCONT)
        history.heal("pause", nodes=[leader.index, other.index])
        assert admin.send(ops.create_group("cg-again", spec)).ok  # the same spec: a write that changes nothing
        admin.send(ops.list_checkpoints("final", "g"))
        await_convergence(history, cluster.endpoints())
        admin.close()
        reader.close()
    report = checker.check(history.ops)
    if bug is None:
        assert report.ok, report.table()
    else:
        assert report.failed() == [epochs.MONOTONIC], report.table()
