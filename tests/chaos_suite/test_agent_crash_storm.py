"""Smoke: the metadata and agent workloads together on a ChaosCluster while the nemesis
runs the agent-crash-storm plan; chaos.checker with the agent workload's results finds
every invariant holding."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos import checker
from chaos.controller import ChaosCluster
from chaos.history import History
from chaos.nemesis import Nemesis
from chaos.scenarios import AGENT_CRASH, SCENARIOS
from chaos.workloads.agents import AgentConfig, AgentWorkload
from chaos.workloads.metadata import MetadataConfig, MetadataWorkload
from tests.support.cluster import FAST

pytestmark = pytest.mark.cluster
SECONDS, SEED = 18.0, 1


def test_agent_crash_storm_beside_the_metadata_workload(tmp_path: Path) -> None:
    plan = SCENARIOS["agent-crash-storm"].faults(SEED, SECONDS)
    with History(tmp_path / "history.jsonl") as history, \
            ChaosCluster(tmp_path / "cluster", 3, settings=FAST, seed=SEED, history=history) as cluster:
        cluster.start_all()
        cluster.leader()
        metadata = MetadataWorkload(history, cluster.endpoints(), MetadataConfig(duration_s=SECONDS, seed=SEED))
        agents = AgentWorkload(history, cluster.endpoints(), tmp_path / "agents",
                               AgentConfig(duration_s=SECONDS, seed=SEED))
        nemesis = Nemesis(cluster, history, plan, seed=SEED, agents=agents)
        metadata.setup()
        agents.setup()
        metadata.start()
        agents.start()
        nemesis.start()
        try:
            agents.wait()
            metadata.wait()
        finally:
            injected = nemesis.stop()
            metadata.finish()
            results = agents.finish()
        report = checker.check(history.ops, extra=results)
    assert nemesis.error is None
    assert report.ok and not report.summary["crashed_processes"], report.table()
    assert injected.by_kind[AGENT_CRASH] >= len(plan)  # two agents per fault
    crashes = agents.counts["crashes"]
    assert sum(crashes.values()) == injected.by_kind[AGENT_CRASH] and len(crashes) >= 3, crashes
    assert {r.name for r in results} <= {r.name for r in report.results}
    assert (tmp_path / "history.jsonl").stat().st_size > 0
