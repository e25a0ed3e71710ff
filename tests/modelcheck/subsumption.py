"""Subsumption: a world that differs from one already queued only by having less
budget left is not explored.

The budgets (World.budgets: failures, leader changes, losses, epochs) are read by
nothing but the guards of the moves that spend them (`if world.losses: yield ...`),
and such a move spends one. Write w <= v when w and v agree on everything but their
budgets and each of w's budgets is at most v's. Then v simulates w:
- every move enabled in w is enabled in v (its guard reads no budget, or one at
  least as large);
- it builds the same step from v (the same label, the same entries applied to the
  same records, the same ghost state: a move reads a budget only to spend it, and
  a spent budget is read by nothing but guards), and
- the two worlds it leads to are again w1 <= v1 (both spend the same budget by one,
  or neither does).
No invariant reads a budget, so w and v, and each pair of steps, get the same
verdicts. By induction on the length, every trace from w is matched by a trace from
v of the same length with the same verdict at every step.

The search (explore.py) therefore skips a new world w when a world v with w <= v
(up to a renaming of agents with symmetry: budgets name no agent) is already queued
for expansion. Breadth first, v was queued at a level no deeper than w's, so every
violation reachable from w within the depth bound is reachable from v within it, by
a trace no longer: each invariant's verdict and its shortest counterexample's length
are kept. Only a world queued for expansion subsumes: one a violation stopped
explores nothing.

What is kept, and checked on two agents (test_subsumption.py): every world the full
search reaches is reached, or is <= one reached.
"""
from __future__ import annotations

Budgets = tuple[int, ...]


class Explored:
    """The budgets of the worlds queued for expansion, by shape (a world's key but
    for its budgets). This table is most of a long search's memory (one entry per
    world), so each world's budgets are packed into one shared int and a shape with
    one world holds that int alone."""

    def __init__(self) -> None:
        self._budgets: dict[int, int | tuple[int, ...]] = {}
        self._packed: dict[Budgets, int] = {}  # one int object per distinct budgets
        self._unpacked: dict[int, Budgets] = {}

    def holds(self, shape: int, budgets: Budgets) -> bool:
        """Whether a world of this shape with these very budgets is queued."""
        found = self._budgets.get(shape)
        packed = self._packed.get(budgets)
        return found is not None and packed is not None and (
            found == packed if isinstance(found, int) else packed in found)

    def covers(self, shape: int, budgets: Budgets) -> bool:
        """Whether a queued world of this shape has at least these budgets, each."""
        found = self._budgets.get(shape)
        if found is None:
            return False
        return any(dominates(self._unpacked[seen], budgets)
                   for seen in ((found,) if isinstance(found, int) else found))

    def add(self, shape: int, budgets: Budgets) -> None:
        packed = self._packed.get(budgets)
        if packed is None:
            packed = self._packed[budgets] = len(self._packed)
            self._unpacked[packed] = budgets
        found = self._budgets.get(shape)
        self._budgets[shape] = packed if found is None else (
            (found, packed) if isinstance(found, int) else found + (packed,))


def dominates(more: Budgets, less: Budgets) -> bool:
    return all(m >= n for m, n in zip(more, less, strict=True))
