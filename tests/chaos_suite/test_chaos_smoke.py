"""The chaos suite's smoke run, as CI runs it: every scenario, briefly, through the CLI.

Each scenario runs `raftpoint chaos run` in its own process (disk scenarios re-execute
themselves in a private mount namespace): a 3-node cluster behind fault proxies, the
workloads, the scenario's faults, then the checker. A run passes only when every
invariant held and the faults it planned were injected. Planted bugs must make the
same command fail on the invariants each explains, and on no other. Soak runs use
the same command with a longer --duration (docs/chaos.md, "Chaos runs").
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.runner import REPORT_FILE
from chaos.scenarios import GROUP_RESTORE, SCENARIOS
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


def smoke_flood(scenario: str) -> int:
    return min(SCENARIOS[scenario].flood, SMOKE_FLOOD_AGENTS)


# A scenario's smoke run is the shortest of these whose plan still injects every kind
# of fault its SMOKE_S plan does: a kill loop's first kill, a pause's first pause. Each
# run also loads TAIL_S past the last heal, so a shorter plan is a shorter run.
SMOKE_CHOICES_S = (6.0, 8.0, 10.0, SMOKE_S)


def smoke_seconds(scenario: str) -> float:
    def kinds(duration: float) -> set[str]:
        return {f.kind for f in SCENARIOS[scenario].faults(1, duration)}

    return next(d for d in SMOKE_CHOICES_S if kinds(d) == kinds(SMOKE_S))


def chaos_run(out: Path, scenario: str, *extra: str, duration: float = SMOKE_S) -> tuple[int, dict]:
    flood = ["--flood-agents", str(smoke_flood(scenario))] if SCENARIOS[scenario].flood else []
    argv = [sys.executable, "-m", "raftpoint.cli.main", "chaos", "run", "--scenario", scenario,
            "--duration", str(duration), "--seed", "1", "--out", str(out), *flood, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    if done.returncode == CANNOT_RUN:
        pytest.skip(done.stdout.strip().splitlines()[-1])
    report_path = out / scenario / REPORT_FILE
    assert report_path.exists(), f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(report_path.read_text())


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_smoke(tmp_path: Path, scenario: str) -> None:
    duration = smoke_seconds(scenario)
    code, report = chaos_run(tmp_path, scenario, duration=duration)
    failed = [i["name"] for i in report["invariants"] if not i["ok"]]
    assert code == 0 and report["ok"] and not report["notes"], (failed, report["notes"], report["summary"])
    planned = SCENARIOS[scenario].faults(1, duration)
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
    if any(f.kind == GROUP_RESTORE for f in planned):  # restores were made, carried out and judged
        restores = next(i for i in report["invariants"] if i["name"] == "agent-restores-return-to-savepoint")
        assert restores["counts"]["restores"] >= 1 and restores["counts"]["restored_agents"] >= 1, restores
    flood = next(i for i in report["invariants"] if i["name"] == "no-healthy-agent-declared-failed")["counts"]
    if SCENARIOS[scenario].flood:  # the flood's agents got in, heartbeated and were judged
        assert flood["agents_registered"] >= smoke_flood(scenario) // 2 and flood["heartbeats_answered"] > 0, flood
        # and no node refused the admin they call as (config-typo: the last good auth files stayed in force)
        assert flood["heartbeats_denied"] == 0, flood
    else:
        assert flood["agents_registered"] == 0, flood


# Each planted bug with the invariants it explains. A run must fail on every one of
# `fails` and on nothing the bug does not explain: an extra failure is a bug of its own
# (accept-stale-epoch under follower-pause once failed replicas-agree too: a follower
# installed a stale snapshot). `may_fail` holds what the bug explains only when the
# workload happens to step on it in a 12 s run (seen failing and holding over runs with
# the same seed); each says why it follows from the bug.
# A planted bug's run is SMOKE_S long whatever its scenario's smoke run: a shorter run
# can miss a bug its plan's faults do step on (skip-replay's power loss, left with less
# load after it). A bug the workload steps on too rarely gets a longer run, and the
# restore's bug its scenario's smoke run, which holds a restore.
PLANTED_S = {"early-running": 24.0, "restore-ignores-savepoint": smoke_seconds("group-restore")}
PLANTED = [
    ("leader-kill-loop", "no-dedupe", {"retries-apply-once"}, {
        # a deliberately re-sent GC is applied again and collects checkpoints its first
        # answer did not list, so a later ListCheckpoints misses them
        "reads-reflect-acknowledged-writes",
        # a GC whose answer was lost to a leader kill and is re-sent is applied twice: the
        # checker learns only the second answer's URIs, so what the first application collected
        # is gone from the final listing with no GC answer listing it
        "acknowledged-checkpoints-survive",
        # re-sent commits and dependency reports applied again change what the lines are
        # computed from, beyond what the history's one application per request shows
        "recovery-lines-consistent-and-maximal",
        # a StartEpoch whose answer a leader kill lost is re-sent by the client under the same
        # request id within one call; applied again, it is refused (its own epoch is still
        # open), so the checker counts that call as starting nothing and the commits for the
        # epoch it did start as made for an epoch that cannot have started
        "stale-writes-refused"}),
    ("follower-pause", "accept-stale-epoch", {"stale-writes-refused"}, {
        # a zombie's commit counted for the open epoch can make it stable on a checkpoint
        # the checker counts for a closed one, so GC's line is higher than the checker's
        "gc-collects-only-unneeded"}),
    ("power-loss", "skip-fsync", {"acknowledged-checkpoints-survive"}, {
        # the groups were never synced and are gone after the power cut: a re-sent
        # request is answered NOT_FOUND instead of its first answer, and every write
        # after the heal is refused, so none is acknowledged
        "retries-apply-once", "serves-after-heal",
        # what each node lost depends on what its page cache had written back when the
        # power went: the nodes may come back with the same loss or with different ones
        "replicas-agree"}),
    ("leader-kill-loop", "gc-too-eager", {"gc-collects-only-unneeded"}, set()),
    ("follower-pause", "stale-list", {"reads-reflect-acknowledged-writes"}, {
        # the final ListCheckpoints, which the survival check reads, may be a stale copy
        "acknowledged-checkpoints-survive"}),
    # Without the dependencies the GC watermark is also higher than the recorded ones allow.
    ("leader-kill-loop", "drop-dependency", {"recovery-lines-consistent-and-maximal", "gc-collects-only-unneeded"},
     set()),
    ("leader-kill-loop", "skip-authz", {"unauthorized-writes-refused"}, {
        # the intruders' Register, Deregister and GarbageCollect are applied: incarnations
        # bumped, recoveries and rollbacks no workload process asked for, checkpoints gone
        "acknowledged-checkpoints-survive", "retries-apply-once", "reads-reflect-acknowledged-writes",
        "recovery-lines-consistent-and-maximal",
        # and the GC watermark follows the lines those recoveries moved, which the
        # checker, knowing only the workload's own writes, does not
        "gc-collects-only-unneeded"}),
    ("agent-flood", "short-lease", {"no-healthy-agent-declared-failed"}, set()),
    ("repair", "repaired-votes", {"acknowledged-checkpoints-survive", "reads-reflect-acknowledged-writes"}, {
        # the stale leader's history replaces the writes the repaired node had acknowledged:
        # every answer that saw them (epochs started, agents registered, epochs closed,
        # dependencies, request ids answered) can be contradicted later
        "epochs-monotonic", "stable-epochs-have-one-identity", "stale-writes-refused",
        "recovery-lines-consistent-and-maximal", "retries-apply-once", "gc-collects-only-unneeded",
        # the old leader comes back holding the dropped history in its store, until it
        # installs a snapshot or its digest audit stops it
        "replicas-agree",
        # a recovery seen over (its last order acknowledged) is dropped with that history, and
        # the next one takes its id with orders acknowledged only after that answer
        "recovery-ends-after-every-ack"}),
    # Seen only in a recovery that rolls back several agents (a CIC or uncoordinated group's):
    # crashed agents make recoveries steadily (2-5 such in a 16-24 s run, where a leader-kill
    # loop made 0-4 now that restored CIC rules force the checkpoints they should), and
    # PLANTED_S gives the run time for several.
    ("agent-crash-storm", "early-running", {"recovery-ends-after-every-ack"}, {
        # an agent still owes the acknowledgement of its rollback when a read shows the group
        # RUNNING, so the checker takes the recovery as settled; a what-if then counts that
        # agent as failed (as the coordinator does) and its line looks further back than needed
        "recovery-lines-consistent-and-maximal"}),
    # The flood's leases run out while every heartbeat is refused. The metadata workload's
    # calls refused meanwhile end `info` and are re-sent, and answered after the heal.
    ("config-typo", "auth-fail-closed", {"no-healthy-agent-declared-failed"}, set()),
    # Every node restarts after the cut, each missing what its store had not committed yet.
    ("power-loss", "skip-replay", {"replicas-agree"}, {
        # a commit acknowledged just before the cut is missing from the new leader's store
        "acknowledged-checkpoints-survive",
        # reads after the cut are answered from a store that lacks that commit
        "reads-reflect-acknowledged-writes",
        # a skipped dependency report is missing from the lines and what-ifs computed later
        "recovery-lines-consistent-and-maximal",
        # a skipped request's stored answer is gone, so its re-send is applied again, differently
        "retries-apply-once",
        # a skipped commit that made an epoch stable: reads see the previous stable epoch again
        "epochs-monotonic",
        # with that epoch's close skipped, a zombie's commit for it is acknowledged
        "stale-writes-refused",
        # with that epoch's close skipped, it is seen stable with a zombie's checkpoint too
        "stable-epochs-have-one-identity",
        # GC's watermark computed without a skipped dependency report is too high
        "gc-collects-only-unneeded",
        # a skipped recovery seen over: the next one takes its id, with orders acknowledged later
        "recovery-ends-after-every-ack"}),
    # A restore goes to the newest consistent line instead of the savepoint: consistent, so
    # only the restore's own check sees that it is not the moment the operator named.
    ("group-restore", "restore-ignores-savepoint", {"agent-restores-return-to-savepoint"}, set()),
    # The node booted a year ahead stamps the dedupe clock a year ahead once it leads.
    ("boot-skew", "unbounded-clock", {"no-refusals-for-time"}, {
        # every write after that is refused as too old, so none is acknowledged after the heal
        "serves-after-heal",
        # the jump forgot every remembered answer: a re-sent request is refused as too old
        # instead of given its first answer
        "retries-apply-once",
        # a request applied while its client saw no answer, then refused as too old when
        # re-sent, counts as not applied for the checker: a dependency report or checkpoint
        # the coordinator computes lines (and GC's watermark) from is missing from its model
        "recovery-lines-consistent-and-maximal", "gc-collects-only-unneeded",
        # and such a checkpoint shows in listings the checker never saw acknowledged
        "reads-reflect-acknowledged-writes",
        # and such a rollback acknowledgement, which ended its recovery, counts as never
        # made: the group is seen RUNNING before an acknowledgement the checker knows of
        "recovery-ends-after-every-ack"}),
]


@pytest.mark.parametrize("scenario, bug, fails, may_fail", PLANTED, ids=[f"{row[0]}-{row[1]}" for row in PLANTED])
def test_a_planted_bug_fails_the_run(tmp_path: Path, scenario: str, bug: str, fails: set[str],
                                     may_fail: set[str]) -> None:
    code, report = chaos_run(tmp_path, scenario, "--bug", bug,
                             duration=PLANTED_S.get(bug, SMOKE_S))
    failed = {i["name"] for i in report["invariants"] if not i["ok"]}
    perhaps = f" and perhaps {sorted(may_fail)}" if may_fail else ""
    assert code == 1 and not report["ok"] and fails <= failed <= fails | may_fail, (
        f"failed: {sorted(failed)}; expected: {sorted(fails)}{perhaps}; not caught: {sorted(fails - failed)}; "
        f"not explained by {bug}: {sorted(failed - fails - may_fail)}; exit {code}; summary: {report['summary']}")


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
