"""A node started with its wall clock a year ahead, made leader, stops no client write.

Before its clock was held to its voters' (replication.voter_clocks), its first
proposal pushed the replicated dedupe clock a year forward: every request stamped
with its client's real time (`raftpoint-issued-at`) was then refused as too old to
deduplicate, on every node, even after leadership moved on.
"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from chaos import node as chaos_node
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, NodeProcess, wait_for
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import FAST, Client
from tests.support.tls import clients_trust

YEAR_S = 365 * 86400
SKEWED = 2


def lead_with(cluster: LocalCluster, index: int, deadline_s: float = 90.0) -> None:
    """Pause whichever other node leads until node `index` wins an election."""
    end = time.monotonic() + deadline_s
    seen: list[str] = []
    while True:
        leader = cluster.leader(timeout=max(1.0, end - time.monotonic()))
        seen.append(leader.raft)
        if leader.index == index:
            return
        assert time.monotonic() < end, f"node {index} never led; leaders seen in turn: {seen}"
        cluster.signal(leader.index, signal.SIGSTOP)
        try:
            def other_leads() -> NodeProcess | None:
                return next((cluster.nodes[i] for i, s in cluster.statuses(exclude=[leader.index]).items()
                             if s.role == "leader"), None)
            wait_for(other_leads, "a leader among the others", max(1.0, end - time.monotonic()), 0.1)
        finally:
            cluster.signal(leader.index, signal.SIGCONT)


@pytest.mark.slow
def test_a_leader_started_a_year_ahead_refuses_no_write(tmp_path: Path) -> None:
    clock_file = tmp_path / "skew"
    clock_file.write_text(str(YEAR_S))
    program = lambda i: chaos_node.program({}, clock_file=clock_file if i == SKEWED else None)  # noqa: E731
    with LocalCluster(tmp_path / "cluster", 3, settings=FAST, program=program).start_all() as cluster:
        client = Client(cluster)
        client.create_group()
        client.register("a")
        lead_with(cluster, SKEWED)
        client.commit("a", 1)  # refused as "too old to deduplicate" when stamped a year ahead
        client.register("b")
        cluster.kill(SKEWED)  # leadership moves to a node whose clock is right
        client.commit("a", 2)
        client.register("c")
        assert client.checkpoints(agent="a") == [1, 2]


@pytest.mark.slow
def test_an_admin_resets_the_dedupe_clock_and_writes_go_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with LocalCluster(tmp_path / "cluster", 3, settings=FAST).start_all() as cluster, clients_trust(cluster):
        cluster.write_endpoints()
        client = Client(cluster)
        client.create_group()
        client.register("a")
        client.commit("a", 1)
        assert raftpoint(["clock", "reset", "--data-dir", str(cluster.root)]) == 0, capsys.readouterr()
        printed = capsys.readouterr().out
        assert printed.startswith("dedupe clock reset to "), printed
        assert abs(client.call("AdminService", "ResetDedupeClock", pb.ResetDedupeClockRequest(
            request_id="again")).clock_s - time.time()) < 30
        client.commit("a", 2)
        assert client.checkpoints(agent="a") == [1, 2]
