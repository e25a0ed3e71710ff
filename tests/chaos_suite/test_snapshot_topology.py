"""A node that catches up from the leader's snapshot must keep one view of the cluster.

pysyncobj stores the snapshot creator's member list in the snapshot and, with dynamic
membership on, a node installing it takes that list as its own. Every node must
therefore name every node by the same address. The chaos proxies once broke that:
the dialer named its peer by the proxy's address, so a node that installed the
leader's snapshot counted itself a second time (a 4-member cluster in its view) and
could no longer reach the third node: after the next leader kill the two survivors
never elected a leader. Soak runs showed it as 3-9 s without writes after each kill.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from pysyncobj.utility import TcpUtility

from chaos.controller import ChaosCluster
from coordinator.harness.local_cluster import wait_for
from tests.chaos_suite.conftest import ProxiedClient
from tests.support.cluster import FAST
from tests.support.tls import clients_trust

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]

SETTINGS = {**FAST, "compaction_min_entries": 40, "compaction_min_time": 0.2}


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[ChaosCluster]:
    with ChaosCluster(tmp_path / "cluster", 3, settings=SETTINGS, seed=5) as c, clients_trust(c):
        c.start_all()
        c.leader()
        yield c


def raft_members(chaos: ChaosCluster, i: int) -> set[str]:
    """The peers node i's pysyncobj believes in (its own status over the Raft port)."""
    status = TcpUtility(chaos.local.password, timeout=3.0).executeCommand(chaos.nodes[i].raft, ["status"])
    return {k.removeprefix("partner_node_status_server_") for k in status if k.startswith("partner_node_status_server_")}


def lead_with(chaos: ChaosCluster, wanted: int) -> None:
    """Kill whoever else leads until `wanted` does (each round is a coin toss between two)."""
    for _ in range(12):
        leader = chaos.leader(timeout=10)
        if leader == wanted:
            return
        chaos.kill(leader)
        chaos.leader(timeout=10, among=[j for j in range(chaos.size) if j != leader])
        chaos.start(leader)
        chaos.converged(timeout=20)
    pytest.fail(f"node {wanted} never became leader")


def test_a_node_restored_from_the_leaders_snapshot_still_elects_without_the_leader(chaos: ChaosCluster) -> None:
    # The node with the greatest address dials both others: under the old wiring it
    # named both by proxy addresses, which is what its snapshot then carried.
    top = max(range(chaos.size), key=lambda i: chaos.nodes[i].raft)
    lagging, other = (i for i in range(chaos.size) if i != top)
    lead_with(chaos, top)
    with ProxiedClient(chaos.endpoints()) as client:
        client.create_group()
        client.register("a")
        chaos.kill(lagging)
        behind = chaos.statuses()[top].applied_index
        index = 0
        deadline = time.monotonic() + 60
        while chaos.statuses()[top].last_snapshot_index <= behind:  # the log it misses is compacted away
            assert time.monotonic() < deadline, "the leader never compacted its log"
            index += 1
            client.commit("a", index)
        chaos.start(lagging)
        chaos.converged(timeout=30)
        wait_for(lambda: chaos.statuses()[lagging].last_snapshot_index > behind, "the restarted node to take the snapshot",
                 timeout=10)

        expected = {chaos.nodes[j].raft for j in range(chaos.size) if j != lagging}
        assert raft_members(chaos, lagging) == expected
        log = (chaos.local.root / f"node{lagging}.log").read_text()
        assert "restoring store from snapshot" in log and "does not name this node" not in log

        chaos.kill(top)
        killed = time.monotonic()
        chaos.leader(timeout=10, among=[lagging, other])
        assert time.monotonic() - killed < 10
        client.commit("a", index + 1)
