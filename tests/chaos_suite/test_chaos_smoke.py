"""The chaos suite's smoke run, as CI runs it: every scenario, briefly, through the CLI.

Each scenario runs `raftpoint chaos run` in its own process (disk scenarios re-execute
themselves in a private mount namespace): a 3-node cluster behind fault proxies, the
workloads, the scenario's faults, then the checker. A run passes only when every
invariant held and the faults it planned were injected. Planted bugs must make the
same command fail, naming the invariant that caught them. Soak runs use the same
command with a longer --duration (README, "Chaos testing").
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.runner import REPORT_FILE
from chaos.scenarios import SCENARIOS
from raftpoint.cli.chaos import CANNOT_RUN
from coordinator.harness.local_cluster import LocalCluster
from tests.support.cluster import FAST
from tests.support.tls import cli_tls

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMOKE_S = 12.0
TIMEOUT_S = 240
# A flood scenario's smoke flood: enough agents to load two cores beside the rest of
# the run, few enough to keep its smoke run under a minute (the soak runs use the
# scenario's own size).
SMOKE_FLOOD_AGENTS = 250


def chaos_run(out: Path, scenario: str, *extra: str) -> tuple[int, dict]:
    flood = ["--flood-agents", str(SMOKE_FLOOD_AGENTS)] if SCENARIOS[scenario].flood else []
    argv = [sys.executable, "-m", "raftpoint.cli.main", "chaos", "run", "--scenario", scenario,
            "--duration", str(SMOKE_S), "--seed", "1", "--out", str(out), *flood, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    if done.returncode == CANNOT_RUN:
        pytest.skip(done.stdout.strip().splitlines()[-1])
    report_path = out / scenario / REPORT_FILE
    assert report_path.exists(), f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(report_path.read_text())


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_smoke(tmp_path: Path, scenario: str) -> None:
    code, report = chaos_run(tmp_path, scenario)
    failed = [i["name"] for i in report["invariants"] if not i["ok"]]
    assert code == 0 and report["ok"] and not report["notes"], (failed, report["notes"], report["summary"])
    planned = SCENARIOS[scenario].faults(1, SMOKE_S)
    injected = sum(report["summary"]["faults_by_kind"].values())
    assert injected >= len(planned) - len(report["skipped_faults"]) > 0, report["summary"]
    assert report["summary"]["ok"] > 100, "the workload kept making progress"
    intrusions = next(i for i in report["invariants"] if i["name"] == "unauthorized-writes-refused")["counts"]
    assert intrusions["attempts"] >= intrusions["refused"] > 0, intrusions  # the rest met a fault: no answer
    agent_checks = {i["name"] for i in report["invariants"] if i["name"].startswith("agent-")}
    if SCENARIOS[scenario].agents:  # the token-passing agents ran, were crashed and were judged
        assert {"agent-tokens-conserved", "agent-no-orphans", "agent-workload"} <= agent_checks, agent_checks
        crashes = next(i for i in report["invariants"] if i["name"] == "agent-workload")["counts"].get("crashes", {})
        assert sum(crashes.values()) == report["summary"]["faults_by_kind"].get("agent-crash", 0), crashes
    flood = next(i for i in report["invariants"] if i["name"] == "no-healthy-agent-declared-failed")["counts"]
    if SCENARIOS[scenario].flood:  # the flood's agents got in, heartbeated and were judged
        assert flood["agents_registered"] >= SMOKE_FLOOD_AGENTS // 2 and flood["heartbeats_answered"] > 0, flood
    else:
        assert flood["agents_registered"] == 0, flood


@pytest.mark.parametrize("scenario, bug, caught_by", [
    ("leader-kill-loop", "no-dedupe", "retries-apply-once"),
    ("follower-pause", "accept-stale-epoch", "stale-writes-refused"),
    ("power-loss", "skip-fsync", "acknowledged-checkpoints-survive"),
    ("leader-kill-loop", "gc-too-eager", "gc-collects-only-unneeded"),
    ("follower-pause", "stale-list", "reads-reflect-acknowledged-writes"),
    ("leader-kill-loop", "drop-dependency", "recovery-lines-consistent-and-maximal"),
    ("leader-kill-loop", "skip-authz", "unauthorized-writes-refused"),
    ("agent-flood", "short-lease", "no-healthy-agent-declared-failed"),
])
def test_a_planted_bug_fails_the_run(tmp_path: Path, scenario: str, bug: str, caught_by: str) -> None:
    code, report = chaos_run(tmp_path, scenario, "--bug", bug)
    assert code == 1 and not report["ok"]
    assert caught_by in [i["name"] for i in report["invariants"] if not i["ok"]], report["summary"]


def test_check_loads_and_checks_a_cluster_someone_else_runs(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", 3, settings=FAST).start_all() as cluster:
        cluster.leader()
        done = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "chaos", "check", "--endpoints",
                               ",".join(cluster.endpoints()), "--duration", "4", "--out", str(tmp_path / "out"),
                               *cli_tls(cluster)],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())
    assert done.returncode == 0 and report["ok"] and report["summary"]["ok"] > 50, done.stdout[-2000:]


@pytest.mark.parametrize("args, message", [
    (["run", "--scenario", "nope"], "unknown scenario 'nope'"),
    (["run", "--scenario", "leader-kill-loop", "--bug", "nope"], "unknown bug 'nope'"),
    (["run", "--scenario", "leader-kill-loop", "--duration", "-1"], "--duration"),
    (["run", "--scenario", "agent-flood", "--flood-agents", "-5"], "--flood-agents"),
    (["check", "--endpoints", " , "], "--endpoints"),
])
def test_bad_arguments_are_refused_with_a_reason(args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "chaos", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr, done.stderr
