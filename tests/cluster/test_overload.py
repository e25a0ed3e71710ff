"""Past saturation, a cluster sheds load instead of blaming agents or losing its leader.

A thousand agents multiplexed on one load-generator process (chaos.workloads.agent_flood)
register and heartbeat at the client's default rate while 128 of them commit
checkpoints back to back, against three real node processes on loopback. Before
admission and the stalled-leader credit, such a load made the leader declare healthy
agents FAILED and lose the lead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.connection import Connection
from chaos.workloads.agent_flood import GROUP_SIZE
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

AGENTS = 1000
COMMITTERS = 128
SECONDS = 20.0
ROOT = Path(__file__).resolve().parents[2]
# etcd's default election timeout (1 s), the node default too, spelt out: the claim is
# that load does not move the leader, and the earlier default's 0.4 s was within the
# scheduling stalls of a loaded two-core machine running other work besides this test.
TIMEOUTS = {"raft_min_timeout": 1.0, "raft_max_timeout": 2.0, "leader_fallback_timeout": 3.0}


def agent_states(conn: Connection, groups: int) -> dict[str, int]:
    states: dict[str, int] = {}
    for g in range(groups):
        token = ""
        while True:
            reply = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=f"flood-{g}", page_token=token))
            states.update((a.agent_id, a.state) for a in reply.agents)
            token = reply.next_page_token
            if not token:
                break
    return states


def settled_terms(cluster: LocalCluster) -> dict[int, int]:
    """Every node's term, once all of them follow one leader."""
    def agreed() -> dict[int, int] | None:
        statuses = cluster.statuses()
        terms = {i: s.term for i, s in statuses.items()}
        leaders = {s.leader for s in statuses.values()}
        return terms if len(statuses) == 3 and len(set(terms.values())) == 1 and "" not in leaders \
            and len(leaders) == 1 else None
    return wait_for(agreed, "every node to follow one leader", 20)


def test_a_flood_of_agents_is_shed_without_false_failures_or_a_lost_leader(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", 3, settings=TIMEOUTS).start_all() as cluster, \
            Connection(cluster.endpoints(), deadline=30, token=cluster.token, tls=cluster.client_tls()) as conn:
        leader = cluster.leader()
        terms = settled_terms(cluster)
        out = tmp_path / "flood.json"
        subprocess.run([sys.executable, "-m", "chaos.workloads.agent_flood", "--endpoints", ",".join(cluster.endpoints()),
                        "--agents", str(AGENTS), "--committers", str(COMMITTERS), "--seconds", str(SECONDS),
                        "--out", str(out), "--token-file", str(cluster.token_file)],
                       env={**os.environ, **cluster.client_tls().environment()}, check=True, timeout=SECONDS + 40, cwd=ROOT)
        result = json.loads(out.read_text())
        # Read at once: every agent's last heartbeat keeps its lease for a while yet.
        states = agent_states(conn, (AGENTS + GROUP_SIZE - 1) // GROUP_SIZE)
        after = {i: s.term for i, s in cluster.statuses().items()}
        outcomes = result["outcomes"]
        print(json.dumps(outcomes, indent=1), len(result["registered"]), "registered")
        assert len(result["registered"]) >= 200, "too few agents got in to make this a flood"
        # An agent the flood never heard registered (its answer timed out) never heartbeated.
        assert set(result["registered"]) <= set(states)
        failed = sorted(a for a in result["registered"] if states[a] != pb.AGENT_ALIVE)
        assert failed == [], f"{len(failed)} heartbeating agents declared failed: {failed[:10]}"
        assert after == terms and cluster.leader().index == leader.index, f"terms moved: {terms} -> {after}"
        shed = sum(n for k, n in outcomes.items() if k.endswith(" SHED"))
        timed_out = sum(n for k, n in outcomes.items() if k.endswith(" DEADLINE_EXCEEDED"))
        # A fast machine may serve the whole flood without shedding (what sheds is checked
        # with an injected lag in tests/transport/test_admission.py); when calls did time
        # out, the node must have shed more than that, not let its loop back up.
        assert timed_out == 0 or shed > timed_out, f"{timed_out} calls timed out, only {shed} were shed"
