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

import bisect
from array import array

Budgets = tuple[int, ...]


class Explored:
    """The budgets of the worlds queued for expansion, by shape (a world's key but
    for its budgets). This table holds an entry per world a search queues (a hundred
    million at the issue's size), so an entry is 10 bytes: the shape's 8 and a 2-byte
    number standing for its budgets (a few dozen distinct tuples), kept in sorted
    arrays, one pair per slice of the shapes (by their low bits), and the slices
    doubled as the table grows so that an entry is inserted by moving a few thousand
    bytes. A dict of ints, as this once was, took about 80 bytes an entry: more
    memory than two long searches have."""

    _PER_SLICE = 4096  # the entries a slice holds on average before the slices double

    def __init__(self) -> None:
        self._bits = 0  # a shape's slice is its low `_bits` bits
        self._shapes = [array("q")]  # each sorted
        self._numbers = [array("H")]  # the budgets' number of the entry beside
        self._size = 0
        self._numbered: dict[Budgets, int] = {}
        self._budgets: list[Budgets] = []  # by number

    def holds(self, shape: int, budgets: Budgets) -> bool:
        """Whether a world of this shape with these very budgets is queued."""
        number = self._numbered.get(budgets)
        return number is not None and number in self._entries(shape)

    def covers(self, shape: int, budgets: Budgets) -> bool:
        """Whether a queued world of this shape has at least these budgets, each."""
        return any(dominates(self._budgets[number], budgets) for number in self._entries(shape))

    def add(self, shape: int, budgets: Budgets) -> None:
        number = self._numbered.get(budgets)
        if number is None:
            number = self._numbered[budgets] = len(self._budgets)
            self._budgets.append(budgets)
        at = self._slice(shape)
        shapes = self._shapes[at]
        i = bisect.bisect_right(shapes, shape)
        shapes.insert(i, shape)
        self._numbers[at].insert(i, number)
        self._size += 1
        if self._size > self._PER_SLICE << self._bits:
            self._double()

    def _entries(self, shape: int) -> list[int]:
        """The budgets' numbers of the worlds of this shape queued."""
        at = self._slice(shape)
        shapes = self._shapes[at]
        i = bisect.bisect_left(shapes, shape)
        return self._numbers[at][i:bisect.bisect_right(shapes, shape, lo=i)].tolist()

    def _slice(self, shape: int) -> int:
        """The slice a shape is kept in: its low `_bits` bits."""
        return shape & ((1 << self._bits) - 1)

    def _double(self) -> None:
        """Split each slice in two by the shapes' next bit (each half stays sorted):
        slice i keeps the shapes without it, slice i + 2**bits takes the others."""
        bit = 1 << self._bits
        low: list[tuple[array[int], array[int]]] = []
        high: list[tuple[array[int], array[int]]] = []
        for shapes, numbers in zip(self._shapes, self._numbers, strict=True):
            halves = (array("q"), array("H")), (array("q"), array("H"))
            for shape, number in zip(shapes, numbers, strict=True):
                half = halves[1 if shape & bit else 0]
                half[0].append(shape)
                half[1].append(number)
            low.append(halves[0])
            high.append(halves[1])
        self._shapes = [half[0] for half in low + high]
        self._numbers = [half[1] for half in low + high]
        self._bits += 1


def dominates(more: Budgets, less: Budgets) -> bool:
    return all(m >= n for m, n in zip(more, less, strict=True))
