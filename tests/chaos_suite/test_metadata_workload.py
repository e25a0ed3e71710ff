"""The metadata workload on a real 3-node cluster, checked: clean under a leader kill, and
caught when a node runs with a planted bug (and only then: the same run without it passes)."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos import checker
from chaos.history import OK, History
from chaos.invariants import fencing, recovery_lines, retries
from chaos.report import Report
from chaos.workloads.metadata import MetadataConfig, MetadataWorkload
from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.chaos_suite.clusters import planted_cluster
from tests.support.cluster import FAST
from tests.support.tls import clients_trust

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]

# Re-registrations are sent again every time and zombies write often, so a few
# seconds are enough for a planted bug to show.
CONFIG = MetadataConfig(duration_s=5.0, recovery_period_s=1.0, zombie_period_s=0.1, register_retry_probability=1.0)


def acknowledged_writes(history: History) -> int:
    return sum(1 for op in list(history.ops) if op.type == OK and op.f in ("commit", "report_deps"))


def run(cluster: LocalCluster, path: Path, config: MetadataConfig = CONFIG, nemesis=None) -> Report:
    cluster.leader()
    with History(path) as history:
        MetadataWorkload(history, cluster.endpoints(), config).run(
            during=None if nemesis is None else lambda: nemesis(history))
    return checker.check(history.ops)


def test_metadata_workload_survives_a_leader_kill(tmp_path: Path) -> None:
    config = MetadataConfig(duration_s=7.0, recovery_period_s=1.0)

    def kill_the_leader(history: History) -> None:
        wait_for(lambda: acknowledged_writes(history) >= 40, "the workload to get going", 20)
        victim = cluster.leader()
        history.fault("kill", node=victim.index)
        cluster.kill(victim.index)
        before = acknowledged_writes(history)
        wait_for(lambda: acknowledged_writes(history) > before + 10, "writes through a new leader", 20)
        cluster.start(victim.index)
        history.heal("kill", node=victim.index)

    with LocalCluster(tmp_path / "cluster", 3, settings=FAST) as cluster, clients_trust(cluster):
        cluster.start_all()
        report = run(cluster, tmp_path / "history.jsonl", config, kill_the_leader)
    assert report.ok and not report.summary["crashed_processes"], report.table()
    counts = {r.name: r.counts for r in report.results}
    assert report.summary["faults"] == 1 and counts["serves-after-heal"]["gap_after_kill_s"] > 0
    assert counts["acknowledged-checkpoints-survive"]["present"] >= 10
    assert counts[recovery_lines.NAME]["recoveries_checked"] >= 1 and counts[recovery_lines.NAME]["what_ifs_checked"] >= 1
    assert counts[retries.NAME]["requests_sent_again"] >= 1
    assert counts[fencing.NAME]["stale_writes_refused"] >= 1
    assert counts["replicas-agree"]["indexes_on_several_nodes"] >= 1
    assert (tmp_path / "history.jsonl").stat().st_size > 0


@pytest.mark.parametrize("bug, caught_by", [
    (None, None),
    ("no-dedupe", retries.NAME),
    ("accept-stale-epoch", fencing.NAME),
])
def test_a_planted_bug_is_caught_by_its_invariant(tmp_path: Path, bug: str | None, caught_by: str | None) -> None:
    with planted_cluster(tmp_path / "cluster", bug) as cluster:
        cluster.start_all()
        report = run(cluster, tmp_path / "history.jsonl")
    assert not report.summary["crashed_processes"], report.table()
    if caught_by is None:
        assert report.ok, report.table()
    else:
        assert caught_by in report.failed(), report.table()
