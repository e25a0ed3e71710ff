"""The agent workload on real clusters.

Every agent crash kind, and a Raft leader kill, leave all its invariants holding; each
planted driver fault -- and a coordinator that accepts stale incarnations -- makes its
own invariant fail, while the same run without it passes. Every wait has a deadline.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

import pytest

from chaos.controller import ChaosCluster
from chaos.history import History
from chaos.report import Report
from chaos.workloads.agent_crashes import CRASH_KINDS, ZOMBIE
from chaos.workloads.agent_group import PLANT_COUNT_TWICE, PLANT_DROP, PLANT_DUPLICATE, PLANT_LOSE_BLOB, PLANT_ORPHAN
from chaos.tokens.invariants import CHECKPOINTS, NAMES, WORKLOAD, ZOMBIES
from chaos.workloads.agents import AgentConfig, AgentWorkload
from chaos.tokens.ledger import DUPLICATES, LOST, ORPHANS, TOKENS
from chaos.tokens.traffic import Traffic
from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.chaos_suite.clusters import planted_cluster
from tests.support.tls import clients_trust

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]
LONG = 120.0  # the workload's own bound; the tests stop it as soon as they are done
CRASHING_S = 80.0  # new crash cycles start only this long, well within LONG


def traffic(wl: AgentWorkload, deliveries: int = 15) -> None:
    """Until some more messages were delivered (the workload is moving)."""
    start = wl.counts["deliveries"]
    wait_for(lambda: wl.counts["deliveries"] >= start + deliveries, f"{deliveries} more deliveries", 30, 0.1)


def crash_cycle(wl: AgentWorkload, rng: random.Random) -> list[str]:
    """What the agent-crash-storm nemesis does: crash, hold a moment, restart."""
    traffic(wl)
    crashed = wl.crash(1, rng)
    traffic(wl, 3)
    wl.restart_crashed()
    return crashed


def fallbacks(history: History) -> list[object]:
    """Why crashes that could not be set up became plain kills (for a failure's message)."""
    return [op.value.get("fallback") for op in history.ops if isinstance(op.value, dict) and op.value.get("fallback")]


def test_every_crash_kind_and_a_leader_kill_keep_the_agent_invariants(chaos: ChaosCluster, tmp_path: Path) -> None:
    wl = AgentWorkload(chaos.history, chaos.endpoints(), tmp_path / "agents", AgentConfig(duration_s=LONG, seed=3))
    rng = random.Random(5)
    # A kind that could not be set up (on a loaded machine a mid-rollback's what-if or
    # hook can miss its chance) comes round again, within these bounds.
    deadline = time.monotonic() + CRASHING_S
    try:
        wl.start()
        for cycle in range(6 * len(CRASH_KINDS)):
            if time.monotonic() > deadline:
                break
            if cycle == 2:
                leader = chaos.leader()
                chaos.history.fault("kill", node=leader)
                chaos.kill(leader)
                traffic(wl)  # the agents carry on through the new leader
                chaos.start(leader)
                chaos.history.heal("kill", node=leader)
            if set(wl.counts["crashes"]) == set(CRASH_KINDS):
                break
            crash_cycle(wl, rng)
    finally:
        report = Report(wl.finish())
    assert report.ok, report.table()
    counts = wl.counts
    assert set(counts["crashes"]) == set(CRASH_KINDS), (counts, fallbacks(chaos.history))
    assert counts["recoveries"] >= len(CRASH_KINDS) and counts["messages"] > 100
    assert report.result(ZOMBIES).counts["refused"] >= 1
    assert report.result(NAMES[TOKENS]).counts["audits"] >= len(wl.groups)
    assert report.result(NAMES[DUPLICATES]).counts["duplicates_refused"] >= 1
    assert report.result(CHECKPOINTS).counts["listed_and_readable"] >= 1
    assert chaos.history.ops and any(op.process == "agents-bcs-faults" for op in chaos.history.ops)


def until(wl: AgentWorkload, done: Callable[[dict[str, int]], bool], rng: random.Random, cycles: int = 6) -> None:
    """Crash cycles until the run has given the planted fault its chance (bounded)."""
    for _ in range(cycles):
        if done(wl.progress()):
            return
        crash_cycle(wl, rng)
    raise AssertionError(f"the run never gave the fault a chance: {wl.progress()}")


# A plant, its invariant, and when the run has given it a chance (the baseline: a couple of recoveries).
PLANTED: list[tuple[str | None, str | None, Callable[[dict[str, int]], bool]]] = [
    (None, None, lambda p: p.get("recoveries", 0) >= 2 and p.get("lost_by_rollbacks", 0) >= 1),
    (PLANT_ORPHAN, NAMES[ORPHANS], lambda p: p.get("planted", 0) >= 1),
    (PLANT_DROP, NAMES[LOST], lambda p: p.get("lost_by_rollbacks", 0) >= 1),
    (PLANT_COUNT_TWICE, NAMES[TOKENS], lambda p: p.get("planted", 0) >= 1),
    (PLANT_DUPLICATE, NAMES[DUPLICATES], lambda p: p.get("planted", 0) >= 1),
    (PLANT_LOSE_BLOB, CHECKPOINTS, lambda p: p.get("commits", 0) >= 1),
]


@pytest.mark.parametrize("plant, caught_by, chance", PLANTED, ids=[str(p[0]) for p in PLANTED])
def test_a_planted_driver_fault_is_caught_by_its_invariant(shared_cluster: LocalCluster, tmp_path: Path,
                                                           plant: str | None, caught_by: str | None,
                                                           chance: Callable[[dict[str, int]], bool]) -> None:
    # Messages held in flight a while, so a crash leaves some whose sends it undoes.
    config = AgentConfig(modes=("bcs",), duration_s=LONG, plant=plant, crash_kinds=("kill",), seed=2,
                         traffic=Traffic(hold_probability=1.0, hold_s=(0.5, 1.5), checkpoint_probability=0.05))
    with clients_trust(shared_cluster):
        wl = AgentWorkload(History(), shared_cluster.endpoints(), tmp_path / "agents", config)
        try:
            wl.start()
            until(wl, chance, random.Random(4))
        finally:
            report = Report(wl.finish())
    if caught_by is None:
        assert report.ok, report.table()
    else:
        assert caught_by in report.failed(), report.table()
        assert WORKLOAD not in report.failed(), report.table()  # the run itself went fine


@pytest.mark.parametrize("bug", [None, "accept-stale-epoch"])
def test_a_zombie_write_accepted_by_the_coordinator_is_caught(tmp_path: Path, bug: str | None) -> None:
    config = AgentConfig(modes=("hmnr",), duration_s=LONG, crash_kinds=(ZOMBIE,), seed=4)
    with planted_cluster(tmp_path / "cluster", bug) as cluster:
        cluster.start_all()
        cluster.leader()
        wl = AgentWorkload(History(), cluster.endpoints(), tmp_path / "agents", config)
        try:
            wl.start()
            crashed = crash_cycle(wl, random.Random(1))
        finally:
            report = Report(wl.finish())
    assert [name.rsplit(":", 1)[1] for name in crashed] == [ZOMBIE]
    zombie = report.result(ZOMBIES)
    assert zombie.counts["writes"] == 1
    if bug is None:
        assert report.ok, report.table()
        assert zombie.counts["refused"] == 1
    else:
        assert ZOMBIES in report.failed() and zombie.counts.get("accepted") == 1, report.table()
