"""The recovery protocol, model-checked over the real core: every mode within small
bounds holds every invariant, and each planted bug is reported by the invariants it
breaks and no other (the full-size run is benchmarks/model_check.py)."""
from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from coordinator.core.model import Mode, OrderKind
from tests.modelcheck import invariants
from tests.modelcheck.explore import BLOCK, IN_MEMORY, check
from tests.modelcheck.planted import PLANTED
from tests.modelcheck.replica import view_of
from tests.modelcheck.world import GROUP, Bounds, World

# Two agents, one send each, checkpoints up to index 1, one failure (a crash or a lease
# expiry), one leader change, one epoch, no loss; every interleaving of up to CI_DEPTH
# steps (a crash, its recovery and the rollback acknowledged take five), one world per
# orbit of agent renamings (test_symmetry.py: that loses nothing).
CI_BOUNDS = {"agents": 2, "max_index": 1, "losses": 0, "epochs": 1}
CI_DEPTH = 7
PLANTED_DEPTH = 12


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(Mode))
def test_every_interleaving_within_bounds_holds_every_invariant(mode: Mode) -> None:
    report = check(Bounds(mode, **CI_BOUNDS), CI_DEPTH, symmetric=True)
    assert not report.violations, "\n\n".join(map(str, report.violations.values()))
    assert report.states > 1000 and report.recoveries > 100, (
        f"{mode}: {report.states} states, {report.recoveries} recoveries: the model explores almost nothing")


@pytest.mark.slow
def test_a_restarted_hmnr_agent_keeps_every_checkpoint_useful() -> None:
    """A restore once left HMNR's clock one checkpoint behind (agent_client.rules): a
    restarted agent's next message then skipped the forced checkpoint that breaks a
    Z-cycle, and the peer's checkpoint became useless (eight steps)."""
    report = check(Bounds(Mode.CIC_HMNR, agents=2, max_index=1, losses=0, leader_changes=0), 9, symmetric=True)
    assert not report.violations, "\n\n".join(map(str, report.violations.values()))


@pytest.mark.slow
@pytest.mark.parametrize("mode,depth", [(Mode.CIC_BCS, 7), (Mode.COORDINATED, 9)], ids=["bcs", "coordinated"])
def test_a_restore_racing_crashes_expiries_and_a_leader_change_holds_every_invariant(mode: Mode, depth: int) -> None:
    """An operator takes a savepoint and restores it, at any point of every interleaving
    (a coordinated savepoint needs a stable epoch first, hence the deeper search)."""
    report = check(Bounds(mode, **CI_BOUNDS, restores=1), depth)
    assert not report.violations, "\n\n".join(map(str, report.violations.values()))
    assert report.restores > 100 and report.recoveries > 100, (
        f"{mode}: {report.restores} restores, {report.recoveries} recoveries: the model explores almost nothing")


@pytest.mark.slow
def test_duplicates_and_a_rollback_owed_during_redelivery_hold_every_invariant() -> None:
    """Two failures and a duplicating network: a receiver re-delivering after one
    rollback is ordered back again before it is done (the library once recursed there
    without end), and duplicated messages arrive after a rollback, all within 8 steps."""
    bounds = Bounds(Mode.CIC_BCS, agents=2, failures=2, losses=1, max_index=1, leader_changes=0)
    seen = {"interrupted": 0, "duplicated": 0}

    def visit(world: World) -> None:
        seen["duplicated"] += len(set(world.net)) < len(world.net)
        owing = {o.agent_id for o in view_of(world.records, GROUP).orders()
                 if o.kind is OrderKind.ROLL_BACK and not o.acked}
        seen["interrupted"] += any(p.backlog and name in owing for name, p in zip(bounds.names, world.procs))

    report = check(bounds, 8, symmetric=True, subsume=True, visit=visit)
    assert not report.violations, "\n\n".join(map(str, report.violations.values()))
    assert seen["interrupted"] and seen["duplicated"], f"{report.states} states, of which {seen}"


REDUCTIONS: dict[str, dict[str, Any]] = {"none": {}, "symmetry": {"symmetric": True}, "subsumption": {"subsume": True},
              "both": {"symmetric": True, "subsume": True}}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_bug_is_reported_by_the_invariants_it_breaks(name: str) -> None:
    """With and without each reduction alike: the same invariant, a counterexample as
    short, in no more states (fewer with symmetry)."""
    bug = PLANTED[name]
    with mock.patch.object(bug.module, bug.attribute, bug.replacement):
        reports = {how: check(Bounds(Mode.CIC_BCS, **bug.bounds), PLANTED_DEPTH, stop_at_first=True, **options)
                   for how, options in REDUCTIONS.items()}
    print(f"{name}: " + ", ".join(f"{r.states} states with {how}" for how, r in reports.items()))
    print(reports["both"].violations.get(bug.breaks[0], "no violation"))
    for how, report in reports.items():
        assert sorted(report.violations) == sorted(bug.breaks), (
            f"reduction {how}: " + ("\n\n".join(map(str, report.violations.values())) or "none"))
    shortest = {how: len(r.violations[bug.breaks[0]].trace) for how, r in reports.items()}
    assert len(set(shortest.values())) == 1, f"counterexamples of different lengths: {shortest}"
    full = reports["none"].states
    assert all(r.states <= full for r in reports.values()), {how: r.states for how, r in reports.items()}
    assert reports["symmetry"].states < full, f"{reports['symmetry'].states} states with symmetry, {full} without"


def test_a_search_that_keeps_its_worlds_on_disk_finds_what_one_in_memory_finds() -> None:
    """Past `in_memory` worlds a depth goes to a temporary file: read back in the order
    queued, they give the same states, depths and shortest counterexample."""
    bug = PLANTED["rollbacks re-deliver nothing"]
    with mock.patch.object(bug.module, bug.attribute, bug.replacement):
        held, spilled = tuple(check(Bounds(Mode.CIC_BCS, **bug.bounds), PLANTED_DEPTH, stop_at_first=True, symmetric=True,
                                    subsume=True, in_memory=n) for n in (IN_MEMORY, 5))
    assert max(held.per_level) > 5 + BLOCK, f"no full block went to disk: {held.per_level} worlds per depth"
    assert (spilled.states, spilled.per_level, spilled.violations) == (held.states, held.per_level, held.violations), (
        f"on disk: {spilled.states} states {spilled.per_level}, {list(spilled.violations.values())}; "
        f"in memory: {held.states} states {held.per_level}, {list(held.violations.values())}")


def test_every_invariant_is_checked() -> None:
    """Each planted bug names an invariant the checker runs."""
    names = set(invariants.STATE_CHECKS) | set(invariants.STEP_CHECKS)
    assert {name for bug in PLANTED.values() for name in bug.breaks} <= names
