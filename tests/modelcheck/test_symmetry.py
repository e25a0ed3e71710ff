"""Symmetry reduction loses nothing: on two agents the reduced search reaches exactly
the orbits the full search reaches (with losses, so retried writes, late writes and
kept answers are renamed too), in fewer states."""
from __future__ import annotations

import pytest

from coordinator.core.model import Mode
from tests.modelcheck import symmetry
from tests.modelcheck.explore import check
from tests.modelcheck.world import Bounds, World

BOUNDS = {"agents": 2, "max_index": 1, "losses": 1, "epochs": 1}
DEPTH = {Mode.COORDINATED: 6, Mode.CIC_HMNR: 5}  # HMNR renames the most: vectors, piggybacks


@pytest.mark.parametrize("mode", [Mode.COORDINATED, pytest.param(Mode.CIC_HMNR, marks=pytest.mark.slow)])
def test_the_reduced_search_reaches_every_orbit_the_full_search_reaches(mode: Mode) -> None:
    bounds = Bounds(mode, **BOUNDS)
    key = symmetry.key(bounds)
    orbits: dict[bool, set[int]] = {False: set(), True: set()}
    reports = {}
    for symmetric in (False, True):
        def visit(world: World, seen: set[int] = orbits[symmetric]) -> None:
            seen.add(key(world))
        reports[symmetric] = check(bounds, DEPTH[mode], symmetric=symmetric, visit=visit)
    full, reduced = reports[False], reports[True]
    print(f"{mode.value}: {full.states} states, {len(orbits[False])} orbits; reduced: {reduced.states} states")
    missed = len(orbits[False] - orbits[True])
    assert missed == 0 and orbits[True] == orbits[False], (
        f"{mode.value}: the reduced search missed {missed} of {len(orbits[False])} orbits the full search reached")
    assert reduced.states == len(orbits[False]) < full.states, (
        f"{mode.value}: {reduced.states} states reduced, {full.states} full, {len(orbits[False])} orbits")


def test_a_string_naming_an_agent_in_an_unknown_shape_is_refused() -> None:
    """A string the renaming cannot rename must stop the search, not pass unrenamed
    (two worlds differing in it could then be merged)."""
    renaming = symmetry.Renaming(Bounds(Mode.CIC_BCS, agents=2), (1, 0))
    assert renaming.text("a-1-1-deps-b1") == "b-1-1-deps-a1"
    assert renaming.text("alive") == "alive"
    with pytest.raises(ValueError, match="may name an agent"):
        renaming.text("agent a failed")


def test_a_field_the_key_does_not_render_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field added to a process or a world and left out of the key would merge worlds
    that differ in it: the encoder refuses to start."""
    rendered = {kind: set(fields) for kind, fields in symmetry._RENDERED.items()}
    rendered[symmetry.Proc].discard("backlog")
    monkeypatch.setattr(symmetry, "_RENDERED", rendered)
    with pytest.raises(AssertionError, match=r"does not render Proc's \['backlog'\]"):
        symmetry.key(Bounds(Mode.CIC_BCS, agents=2))
