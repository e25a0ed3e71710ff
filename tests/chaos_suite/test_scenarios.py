"""Scenario plans are reproducible from their seed, heal inside the run and never stack faults."""
from __future__ import annotations

import random

import pytest

from chaos.linkfaults import LinkFaults, delay
from chaos.repair import roles
from chaos.scenarios import (BOOT_SKEW, BOOT_SKEW_HEAL_S, BOOT_SKEW_HOLD, DISK_FAULTS, FOLLOWER, LEADER,
                             NODE_FAULTS, AGENT_FAULTS, REPAIR, REPAIR_HEAL_S, REPAIR_HOLD, SCENARIOS, RESTART)

REQUIRED = {"leader-kill-loop", "follower-pause", "partition-leader", "asymmetric-partition", "flapping-links",
            "disk-full", "rolling-restart", "agent-crash-storm", "random-mix", "repair", "boot-skew"}


def test_the_issue_s_scenarios_exist() -> None:
    assert REQUIRED <= set(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_plan_is_reproducible_bounded_and_sequential(name: str) -> None:
    scenario = SCENARIOS[name]
    plan = scenario.faults(seed=3, duration=60.0)
    assert plan, "a minute is long enough for at least one fault"
    assert plan == scenario.faults(seed=3, duration=60.0)
    assert all(0 < f.at and f.heal_at <= 60.0 for f in plan)
    assert all(f.kind in NODE_FAULTS + AGENT_FAULTS for f in plan)
    for f in plan:  # parameters the link layer accepts
        LinkFaults(flaky_p=float(f.params.get("probability", 0.0)),
                   up=delay(float(f.params.get("delay_ms", 0.0))))
    for earlier, later in zip(plan, plan[1:]):
        assert earlier.heal_at <= later.at or later.kind == RESTART, (earlier, later)


def test_seeds_change_the_plan() -> None:
    plans = {tuple(SCENARIOS["random-mix"].faults(seed, 60.0)) for seed in range(5)}
    assert len(plans) == 5


def test_disk_needs_are_declared() -> None:
    assert SCENARIOS["disk-full"].needs_disks(1, 60.0)
    assert SCENARIOS["power-loss"].needs_disks(1, 60.0)
    assert not SCENARIOS["leader-kill-loop"].needs_disks(1, 60.0)
    assert any(f.kind in DISK_FAULTS for s in range(10) for f in SCENARIOS["random-mix"].faults(s, 120.0))


@pytest.mark.parametrize("size", [3, 5])
def test_repair_roles_leave_the_writes_on_nodes_that_are_down(size: int) -> None:
    """The holders of the writes (leader, repaired, witnesses) are a bare majority, and the
    nodes started while they are down (repaired, stale) one too: the majority that must
    not elect a leader without the writes."""
    majority = size // 2 + 1
    for seed in range(10):
        leader = seed % size
        r = roles(leader, size, random.Random(seed))
        holders, started = {r.leader, r.repaired, *r.witnesses}, {r.repaired, *r.stale}
        assert len(holders) == len(started) == majority, r
        assert holders | started == set(range(size)) and holders & started == {r.repaired}, r
        assert r.leader == leader and r.repaired != leader, r


@pytest.mark.parametrize("kind, target, hold, heal_s", [(REPAIR, LEADER, REPAIR_HOLD, REPAIR_HEAL_S),
                                                        (BOOT_SKEW, FOLLOWER, BOOT_SKEW_HOLD, BOOT_SKEW_HEAL_S)])
def test_random_mix_draws_the_long_faults_on_their_target_with_time_to_heal(
        kind: str, target: str, hold: tuple[float, float], heal_s: float) -> None:
    plans = [SCENARIOS["random-mix"].faults(seed, 120.0) for seed in range(10)]
    drawn = [(f, plan[n + 1] if n + 1 < len(plan) else None) for plan in plans for n, f in enumerate(plan)
             if f.kind == kind]
    assert drawn, f"random-mix never drew {kind}"
    for f, after in drawn:
        assert f.target == target and hold[0] <= f.hold <= hold[1], f
        assert after is None or after.at >= f.heal_at + heal_s, (f, after)
