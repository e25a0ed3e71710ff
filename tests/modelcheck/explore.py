"""Breadth-first search of every world reachable within a depth, invariants checked on
every state and every transition.

Worlds are immutable values, so a visited world is remembered by its hash (64 bits:
a collision, which would skip a state, is astronomically unlikely at these sizes),
or, with `symmetric`, by the hash of its smallest renaming (symmetry.py): one world
per orbit of agent renamings is then explored. With `subsume`, a world that has only
less budget left than one already queued is not explored (subsumption.py).
A transition that breaks an invariant is reported with the shortest trace to it
(breadth first) and not explored further.

What a search keeps is sized for a hundred million worlds: per world seen, an entry
of the subsumption table (10 bytes) and two numbers to rebuild its trace (Traces, 8
bytes); and the worlds of the depth being expanded and of the next one, the
bulk (about 1.5 KB each in memory), which past `in_memory` worlds a depth keeps on
disk instead (Level, about a hundred bytes each).
"""
from __future__ import annotations

import contextlib
import itertools
import pickle
import shutil
import tempfile
import time
import zlib
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

from tests.modelcheck import invariants, replica, saved_search, symmetry
from tests.modelcheck.memo import Memo
from tests.modelcheck.replica import view_of
from tests.modelcheck.subsumption import Explored
from tests.modelcheck.world import GROUP, Bounds, World, initial, moves

IN_MEMORY = 1_000_000  # worlds of one depth held in memory; the rest go to a temporary file
MADE_LIMIT = 1 << 23  # keys of one depth's new worlds remembered by the world's own hash
SAVE_EVERY = 900.0  # seconds between two saves of a search partway through a depth
PROGRESS_EVERY = 600.0  # seconds between two progress reports partway through a depth
BLOCK = 64  # worlds pickled and compressed together on disk (Level): larger blocks barely shrink


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
          progress: Callable[[Report, int], None] | None = None, progress_every: float = PROGRESS_EVERY,
          in_memory: int = IN_MEMORY, save_dir: Path | None = None, save_every: float = SAVE_EVERY) -> Report:
    """Explore every interleaving of at most `depth` transitions from the initial world
    (or as many as `max_seconds` allows: the report then says it is not complete);
    `symmetric`: one world per orbit of agent renamings; `subsume`: no world with less
    budget than one queued. `visit` sees each new world explored; `progress` sees the
    report and how many worlds of the depth being expanded are done: 0 each time the
    search starts a deeper level (every shallower one is done), and more every
    `progress_every` seconds while it expands one (and at once when it resumes a
    save taken partway), since a deep level takes hours;
    `in_memory`: the worlds of one depth held in memory, the rest kept on disk;
    `save_dir`: a directory the search saves itself to as each depth starts and every
    `save_every` seconds while it expands one, and, run again, resumes from
    (saved_search.py); the report's seconds then count every run."""
    began = time.perf_counter()
    replica.forget()
    symmetry.forget()
    shape_of: Callable[[World], int] = (symmetry.shape(bounds) if symmetric
                                         else lambda world: hash(world.without_budgets()))
    if save_dir is not None and not symmetric:
        raise saved_search.SaveRefused("a search without symmetry keys a world by Python's hash of it, which "
                                       "another process computes differently: a saved search needs the symmetric key")
    with contextlib.nullcontext() if save_dir is None else saved_search.claimed(save_dir):
        ident = {} if save_dir is None else saved_search.identity(bounds, symmetric, subsume)
        saved = None if save_dir is None else saved_search.load(save_dir, ident, depth)
        # stopped: the keys of the worlds a violation stopped (met again, they are skipped)
        queued, stopped, traces, report = (Explored(), set[int](), Traces(), Report(bounds, depth, complete=True))
        current, following, at = Level(in_memory), Level(in_memory), 0
        if saved is not None:
            queued, stopped, traces, report = (saved.tables[name] for name in ("queued", "stopped", "traces", "report"))
            current = Level.saved(saved.worlds, saved.tables["size"])
            following = Level.saved(saved.following, saved.tables["following"], growing=True)
            at, report.depth = saved.at, depth

        def found(name: str, detail: str, parent: int | None, label: str) -> None:
            if name not in report.violations:
                report.violations[name] = Violation(name, detail, traces.trace(parent, label))

        if saved is None:
            first = initial(bounds)
            _check_state(first, None, "initial", report, found)
            if visit is not None:
                visit(first)
            queued.add(shape_of(first), first.budgets)
            current.add(first, traces.add(None, "initial"))
            _count(report.per_level, 0)
        started = began - report.seconds
        deadline = None if max_seconds is None else began + max_seconds
        # The save the search stands at: (depth, worlds of it expanded), and when it was taken.
        last_save = (saved.at, saved.expanded) if saved is not None else None
        last_saved_at = time.perf_counter()
        # When the search last reported partway through a depth (None: at the next world).
        last_progress_at: float | None = None if saved is not None and saved.expanded else time.perf_counter()

        def between_worlds() -> None:
            """Between two worlds of a depth: report progress and save when due."""
            nonlocal last_progress_at
            expanded = report.per_level[at] - current.size
            if progress is not None and expanded and (
                    last_progress_at is None or time.perf_counter() - last_progress_at >= progress_every):
                report.seconds = time.perf_counter() - started
                progress(report, expanded)
                last_progress_at = time.perf_counter()
            maybe_save(expanded)

        def maybe_save(expanded: int) -> None:
            """Save the search as it stands between two worlds (`expanded` of this depth's
            done), as each depth starts and every `save_every` seconds, unless it stands
            where it was last saved."""
            nonlocal last_save, last_saved_at
            here = (at, expanded)
            if save_dir is None or here == last_save or (here[1] and time.perf_counter() - last_saved_at < save_every):
                return
            report.seconds = time.perf_counter() - started
            saved_search.save(save_dir, ident, *here, {
                "queued": queued, "stopped": stopped, "traces": traces, "report": report,
                "size": current.size, "following": following.size},
                {"worlds": current.write, "following": following.write})
            last_save, last_saved_at = here, time.perf_counter()

        while current.size and not (stop_at_first and report.violations):
            report.seconds = time.perf_counter() - started
            if progress is not None and report.per_level[at] == current.size and at > 0:
                progress(report, 0)
                last_progress_at = time.perf_counter()
            # The keys of the worlds this depth's expansion made, by each world's own hash: about
            # half the transitions make a world another order of the same moves made already,
            # and its key (the search's costliest step) is then looked up, not computed again.
            made = Memo[int, int](MADE_LIMIT)
            for world, number in current.drain(between=between_worlds):
                if stop_at_first and report.violations:
                    break
                if deadline is not None and time.perf_counter() > deadline:
                    report.complete = False
                    break
                report.depth_reached = at
                if at == depth:
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
                        found(name, detail, number, step.label)
                    after = step.after
                    after_shape = made.get(after_hash := hash(after))
                    if after_shape is None:
                        after_shape = made.remember(after_hash, shape_of(after))
                    after_key = hash((after_shape, after.budgets))
                    if queued.holds(after_shape, after.budgets) or after_key in stopped:
                        continue
                    if subsume and queued.covers(after_shape, after.budgets):
                        report.subsumed += 1
                        continue
                    report.states += 1
                    if visit is not None:
                        visit(after)
                    if broken or not _check_state(after, number, step.label, report, found):
                        stopped.add(after_key)
                        continue
                    queued.add(after_shape, after.budgets)
                    following.add(after, traces.add(number, step.label))
                    _count(report.per_level, at + 1)
            else:  # every world of this depth expanded
                current, following, at = following, Level(in_memory), at + 1
                continue
            break  # the deadline passed, or stop_at_first found a violation
        report.states += 1  # the initial world
        report.seconds = time.perf_counter() - started
        return report


class Traces:
    """How each queued world was first reached, by its number: its parent's number and
    the step's label, two arrays of 4-byte numbers (labels recur: one copy each)."""

    def __init__(self) -> None:
        self._parents = array("I")
        self._labels = array("I")
        self._names: list[str] = []
        self._ids: dict[str, int] = {}

    def add(self, parent: int | None, label: str) -> int:
        """Number a world reached from `parent` (None: the initial world) by `label`."""
        found = self._ids.get(label)
        if found is None:
            found = self._ids[label] = len(self._names)
            self._names.append(label)
        self._parents.append(len(self._parents) if parent is None else parent)
        self._labels.append(found)
        return len(self._parents) - 1

    def trace(self, parent: int | None, last: str) -> tuple[str, ...]:
        """The labels from the initial world to `parent`, then `last`."""
        labels = [last]
        while parent is not None and self._parents[parent] != parent:
            labels.append(self._names[self._labels[parent]])
            parent = self._parents[parent]
        return tuple(reversed(labels))


class Level:
    """The worlds queued at one depth with their numbers, read back once in the order
    queued: the first `in_memory` held in memory, the rest on disk, BLOCK at a time
    in one record (a depth of a long search holds millions of worlds). A saved search
    keeps a depth's worlds as one such file (`write`, `saved`), the ones not yet
    read when it is saved partway through expanding the depth.

    Why blocks: worlds of one depth differ in a few fields, so a block pickled as one
    list (shared parts once) and compressed as one stream takes about a hundred bytes
    a world, where a world pickled and compressed alone took 1.3 to 1.5 KB; writing
    and reading it back cost less too. A disk record is a 4-byte length, then the
    block's list of (world, number) pairs, pickled and compressed."""

    def __init__(self, in_memory: int) -> None:
        self._in_memory = in_memory
        self._held: deque[tuple[World, int]] = deque()  # read first (a block read from disk joins them)
        self._block: list[tuple[World, int]] = []
        self._file: IO[bytes] | None = None
        self._read_at = 0  # where the file's first record not yet read starts
        self.size = 0  # worlds queued and not yet read

    @classmethod
    def saved(cls, path: Path, size: int, *, growing: bool = False) -> Level:
        """The `size` worlds a saved search wrote to `path` (which stays: the save's);
        `growing`: a depth still being queued, copied so that worlds can be added."""
        level = cls(0)
        if growing:
            level._file = tempfile.TemporaryFile()
            with open(path, "rb") as src:
                shutil.copyfileobj(src, level._file)
        else:
            level._file = open(path, "rb")
        level.size = size
        return level

    def add(self, world: World, number: int) -> None:
        self.size += 1
        if self._file is None and len(self._held) < self._in_memory:
            self._held.append((world, number))
            return
        self._block.append((world, number))
        if len(self._block) == BLOCK:
            self._spill()

    def write(self, put: Callable[[bytes], object]) -> None:
        """Every world queued and not yet read to `put`, in the order queued, keeping them."""
        held = iter(self._held)
        while block := list(itertools.islice(held, BLOCK)):
            put(_record(block))
        self._spill()
        if self._file is not None:
            self._file.seek(self._read_at)
            while chunk := self._file.read(1 << 20):
                put(chunk)

    def drain(self, between: Callable[[], None] = lambda: None) -> Iterator[tuple[World, int]]:
        """Each world once, in the order queued, let go as it is read; `between()` is
        called before each is read, when the one before it is wholly expanded: the
        moment a search can be saved."""
        self._spill()
        while True:
            while self._held:
                between()
                self.size -= 1
                yield self._held.popleft()
            if not self._read_block():
                return

    def _read_block(self) -> bool:
        """The next block on disk into memory; False when none is left."""
        if self._file is None:
            return False
        self._file.seek(self._read_at)
        size = self._file.read(4)
        if not size:
            self._file.close()
            self._file = None
            return False
        self._held.extend(pickle.loads(zlib.decompress(self._file.read(int.from_bytes(size, "little")))))
        self._read_at = self._file.tell()
        return True

    def _spill(self) -> None:
        """The worlds added since the last block, as one block on disk."""
        if not self._block:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile()
        self._file.seek(0, 2)
        self._file.write(_record(self._block))
        self._block = []


def _record(block: list[tuple[World, int]]) -> bytes:
    """A block of queued worlds as Level keeps it on disk: a length, then the pairs pickled and compressed."""
    record = zlib.compress(pickle.dumps(block, pickle.HIGHEST_PROTOCOL), 6)
    return len(record).to_bytes(4, "little") + record


def _count(per_level: list[int], level: int) -> None:
    per_level.extend([0] * (level + 1 - len(per_level)))
    per_level[level] += 1


Found = Callable[[str, str, "int | None", str], None]


def _check_state(world: World, parent: int | None, label: str, report: Report, found: Found) -> bool:
    """Run every state invariant; False if one fails (the state is then not expanded)."""
    view = view_of(world.records, GROUP)
    ok = True
    for name, f in invariants.STATE_CHECKS.items():
        detail = f(world, view)
        if detail is not None:
            found(name, detail, parent, label)
            ok = False
    return ok
