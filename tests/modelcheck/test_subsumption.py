"""Subsumption loses nothing: on two agents every world the full search reaches is
reached by the reduced search, or has at most the budgets of one it reaches (with
losses, so lost requests, answers and acknowledgements are retried, and a leader
change), in fewer states; with symmetry too, up to a renaming of agents."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

import pytest

from coordinator.core.model import Mode
from tests.modelcheck import symmetry
from tests.modelcheck.explore import check
from tests.modelcheck.subsumption import Budgets, Explored, dominates
from tests.modelcheck.world import Bounds, World

BOUNDS = {"agents": 2, "max_index": 1, "losses": 1, "epochs": 1}


@pytest.mark.parametrize("mode,depth,symmetric", [(Mode.COORDINATED, 7, False), (Mode.CIC_BCS, 5, False),
                                                  (Mode.COORDINATED, 6, True)],
                         ids=["coordinated", "bcs", "coordinated-symmetric"])
def test_every_world_of_the_full_search_is_reached_or_subsumed(mode: Mode, depth: int, symmetric: bool) -> None:
    bounds = Bounds(mode, **BOUNDS)
    shape: Callable[[World], int] = (symmetry.shape(bounds) if symmetric
                                     else lambda world: hash(world.without_budgets()))
    reached: dict[bool, dict[int, set[Budgets]]] = {False: defaultdict(set), True: defaultdict(set)}
    reports = {}
    for subsume in (False, True):
        def visit(world: World, seen: dict[int, set[Budgets]] = reached[subsume]) -> None:
            seen[shape(world)].add(world.budgets)
        reports[subsume] = check(bounds, depth, subsume=subsume, symmetric=subsume and symmetric, visit=visit)
    full, reduced = reports[False], reports[True]
    print(f"{mode.value}: {full.states} states, reduced {reduced.states} ({reduced.subsumed} subsumed)")
    missed = [(key, budgets) for key, seen in reached[False].items() for budgets in seen
              if not any(dominates(kept, budgets) for kept in reached[True].get(key, ()))]
    assert not missed, f"{mode.value}: {len(missed)} of {full.states} worlds neither reached nor subsumed: {missed[:5]}"
    assert not full.violations and not reduced.violations
    assert reduced.states < full.states, f"{mode.value}: {reduced.states} states reduced, {full.states} full"


def test_the_table_holds_equal_budgets_and_covers_at_most_them() -> None:
    table = Explored()
    table.add(1, (2, 1, 0, 1))
    table.add(1, (0, 1, 1, 1))
    assert table.holds(1, (2, 1, 0, 1)) and not table.holds(1, (1, 1, 0, 1)) and not table.holds(2, (2, 1, 0, 1))
    assert table.covers(1, (1, 1, 0, 1)) and table.covers(1, (0, 0, 1, 0)), "either world queued covers these"
    assert not table.covers(1, (1, 1, 1, 1)) and not table.covers(2, (0, 0, 0, 0)), "neither covers these"
    one = Explored()
    one.add(1, (2, 1, 0, 1))
    assert one.holds(1, (2, 1, 0, 1)) and not one.holds(1, (1, 1, 0, 1)), "a shape with one world: equal only"
    assert one.covers(1, (1, 1, 0, 1)) and not one.covers(1, (2, 2, 0, 1)), "a shape with one world covers less"


def test_shapes_that_share_a_slice_of_the_table_keep_their_own_budgets_as_it_grows() -> None:
    table = Explored()
    table._PER_SLICE = 2  # the slices double at 3, 5, 9 and 17 entries
    neighbours = [7 + n * 1024 for n in (-3, 2, 0, -1, 1)] + [7 + n * 2 for n in (3, -2)] + [-(1 << 63), (1 << 63) - 1]
    for n, shape in enumerate(neighbours):
        table.add(shape, (n, 0, 0, 0))
        table.add(shape, (0, n, 0, 0))
    assert table._bits == 4, f"the table has {2 ** table._bits} slices for {2 * len(neighbours)} entries"
    for n, shape in enumerate(neighbours):
        others = [m for m in range(len(neighbours)) if m != n]
        assert table.holds(shape, (n, 0, 0, 0)) and table.holds(shape, (0, n, 0, 0)), f"shape {shape} lost an entry"
        assert not any(table.holds(shape, (m, 0, 0, 0)) for m in others), f"shape {shape} holds another's budgets"
        assert table.covers(shape, (n, 0, 0, 0)) and not table.covers(shape, (n + 1, 0, 0, 0)), (
            f"shape {shape} covers what its own budgets do not")
