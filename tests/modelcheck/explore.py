"""Breadth-first search of every world reachable within a depth, invariants checked on
every state and every transition.

Worlds are immutable values, so a visited world is remembered by its hash (64 bits:
a collision, which would skip a state, is astronomically unlikely at these sizes),
or, with `symmetric`, by the hash of its smallest renaming (symmetry.py): one world
per orbit of agent renamings is then explored. With `subsume`, a world that has only
less budget left than one already queued is not explored (subsumption.py).
A transition that breaks an invariant is reported with the shortest trace to it
(breadth first) and not explored further.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tests.modelcheck import invariants, replica, symmetry
from tests.modelcheck.subsumption import Explored
from tests.modelcheck.replica import view_of
from tests.modelcheck.world import GROUP, Bounds, World, initial, moves


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    trace: tuple[str, ...]

    def __str__(self) -> str:
        steps = "\n".join(f"  {n + 1}. {label}" for n, label in enumerate(self.trace))
        return f"{self.invariant}: {self.detail}\n{steps}"


@dataclass
class Report:
    bounds: Bounds
    depth: int
    states: int = 0
    transitions: int = 0
    depth_reached: int = 0
    seconds: float = 0.0
    recoveries: int = 0  # transitions that started a recovery (each judged against brute force)
    restores: int = 0  # transitions that applied an operator's restore
    subsumed: int = 0  # transitions to a new world not explored: one with at least its budgets was queued
    per_level: list[int] = field(default_factory=list)  # states queued for expansion at each depth
    complete: bool = False  # no state at the depth bound had a successor left unexplored
    violations: dict[str, Violation] = field(default_factory=dict)


def check(bounds: Bounds, depth: int, *, stop_at_first: bool = False, max_seconds: float | None = None,
          symmetric: bool = False, subsume: bool = False, visit: Callable[[World], None] | None = None,
          progress: Callable[[Report], None] | None = None) -> Report:
    """Explore every interleaving of at most `depth` transitions from the initial world
    (or as many as `max_seconds` allows: the report then says it is not complete);
    `symmetric`: one world per orbit of agent renamings; `subsume`: no world with less
    budget than one queued. `visit` sees each new world explored; `progress` sees the
    report each time the search starts a deeper level (every shallower one is done)."""
    started = time.perf_counter()
    replica.forget()
    symmetry.forget()
    shape_of: Callable[[World], int] = (symmetry.shape(bounds) if symmetric
                                         else lambda world: hash(world.without_budgets()))
    queued = Explored()
    report = Report(bounds, depth)
    first = initial(bounds)
    first_shape = shape_of(first)
    first_key = hash((first_shape, first.budgets))
    parents: Parents = {first_key: None}
    frontier: deque[tuple[World, int, int]] = deque([(first, first_key, 0)])
    queued.add(first_shape, first.budgets)
    report.complete = True
    _count(report.per_level, 0)

    def trace(key: int, last: str) -> tuple[str, ...]:
        labels = [last]
        link = parents[key]
        while link is not None:
            key, label = link
            labels.append(label)
            link = parents[key]
        return tuple(reversed(labels))

    def found(name: str, detail: str, key: int, label: str) -> None:
        if name not in report.violations:
            report.violations[name] = Violation(name, detail, trace(key, label))

    _check_state(first, first_key, "initial", parents, report, found)
    if visit is not None:
        visit(first)
    deadline = None if max_seconds is None else started + max_seconds
    while frontier and not (stop_at_first and report.violations):
        if deadline is not None and time.perf_counter() > deadline:
            report.complete = False
            break
        world, key, level = frontier.popleft()
        if level > report.depth_reached and progress is not None:
            report.seconds = time.perf_counter() - started
            progress(report)
        report.depth_reached = max(report.depth_reached, level)
        if level == depth:
            report.complete = report.complete and not any(True for _ in moves(world, bounds))
            continue
        for _label, build in moves(world, bounds):
            step = build()
            if step is None:
                continue
            report.transitions += 1
            report.recoveries += invariants.recoveries_started(step)
            report.restores += invariants.restores_applied(step)
            broken = [(n, d) for n, f in invariants.STEP_CHECKS.items() if (d := f(step)) is not None]
            for name, detail in broken:
                found(name, detail, key, step.label)
            after = step.after
            after_shape = shape_of(after)
            after_key = hash((after_shape, after.budgets))
            if after_key in parents:
                continue
            if subsume and queued.covers(after_shape, after.budgets):
                report.subsumed += 1
                continue
            parents[after_key] = (key, sys.intern(step.label))  # labels recur: one copy each
            report.states += 1
            if visit is not None:
                visit(after)
            if broken or not _check_state(after, after_key, step.label, parents, report, found):
                continue
            frontier.append((after, after_key, level + 1))
            _count(report.per_level, level + 1)
            queued.add(after_shape, after.budgets)
    report.states += 1  # the initial world
    report.seconds = time.perf_counter() - started
    return report


def _count(per_level: list[int], level: int) -> None:
    per_level.extend([0] * (level + 1 - len(per_level)))
    per_level[level] += 1


Parents = dict[int, "tuple[int, str] | None"]  # state hash -> (its parent's, the step's label)
Found = Callable[[str, str, int, str], None]


def _check_state(world: World, key: int, label: str, parents: Parents, report: Report, found: Found) -> bool:
    """Run every state invariant; False if one fails (the state is then not expanded)."""
    view = view_of(world.records, GROUP)
    ok = True
    for name, f in invariants.STATE_CHECKS.items():
        detail = f(world, view)
        if detail is not None:
            link = parents[key]
            found(name, detail, link[0] if link else key, label)
            ok = False
    return ok
