"""A trace shows where a slow commit spent its time: with the leader's Raft links
delayed, the commit's replication span holds the delay and is the slowest of its
stages, while a commit before the delay shows no such stage.

The delay is the chaos suite's link fault (every byte between the leader and each
follower held DELAY_MS in each direction), so an entry reaches a majority's journal
no sooner than one round trip, 2 * DELAY_MS."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra (opentelemetry-sdk) is not installed")

from chaos.controller import ChaosCluster  # noqa: E402
from coordinator.harness.local_cluster import wait_for  # noqa: E402
from coordinator.tracing import TRACE_FILE_ENV, read_trace_file  # noqa: E402
from tests.support.cluster import STABLE, Client  # noqa: E402
from tests.support.tls import clients_trust  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.chaos]

DELAY_MS = 80.0
COMMIT_SPAN = "/raftpoint.v1.AgentService/CommitCheckpoint"


def commits(path: Path, count: int) -> list[dict[str, float]]:
    """The leader's stage spans (name: ms) under each commit call that has them (a
    call a follower redirected has none), in the order the calls ended; waits until
    `count` are written (a call's span ends just after its answer is sent)."""
    def written() -> list[dict[str, float]] | None:
        found = read_trace_file(path) if path.exists() else []
        stages = [{c.name: c.ms for c in found if c.parent_id == call.span_id}
                  for call in found if call.name == COMMIT_SPAN]
        stages = [s for s in stages if s]
        return stages if len(stages) >= count else None
    return wait_for(written, f"{count} traced commits with stage spans in {path}", timeout=30.0)


def test_a_delayed_replication_is_the_slowest_stage_of_the_commits_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv(TRACE_FILE_ENV, str(trace_file))  # the nodes inherit it
    with ChaosCluster(tmp_path / "cluster", 3, settings=STABLE, seed=5) as chaos, clients_trust(chaos):
        chaos.start_all()
        leader = chaos.leader()
        client = Client(chaos.local)
        client.target = chaos.nodes[leader].grpc
        client.create_group()
        client.register("a")
        client.commit("a", 1)
        [quick] = commits(trace_file, 1)
        for follower in range(chaos.size):
            if follower != leader:
                chaos.network.delay(leader, follower, DELAY_MS)
        client.commit("a", 2)
        assert chaos.leader() == leader, "the leader changed under the delay: the trace below is another node's"
        slow = commits(trace_file, 2)[1]
    slowest = max(slow, key=slow.__getitem__)
    assert "replicate" in slowest and slow[slowest] >= 2 * DELAY_MS * 0.9, (
        f"with the leader's links delayed {DELAY_MS} ms each way the stages were {slow} (before the delay: {quick})")
    assert slow[slowest] > quick.get(slowest, 0.0), f"before the delay: {quick}; with it: {slow}"
