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

A world's expansion (Expander) is apart from its admission (`admit` in check): with
`workers`, several processes expand a depth and the search admits their batches in
the depth's order (workers.py), to the same report.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import shutil
import tempfile
import time
import zlib
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Callable

from tests.modelcheck import invariants, replica, saved_search, symmetry
from tests.modelcheck import workers as workers_
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


@dataclass(frozen=True)
class StepBroken:
    """A transition that broke a step invariant."""

    invariant: str
    detail: str
    label: str


@dataclass(frozen=True)
class Successor:
    """A world a transition made that the search had not taken when it was made, keyed
    by its shape (symmetry.py) and budgets; `world` is None for a repeat of a key the
    expansion shipped already (the search meets that one first)."""

    shape: int
    budgets: tuple[int, int, int, int]
    key: int
    world: World | None
    label: str
    broken: bool  # the transition broke a step invariant: the world is not expanded
    failures: tuple[tuple[str, str], ...]  # the state invariants it breaks (not checked if broken)


@dataclass
class Batch:
    """What expanding one world yields, in the order a search takes it in."""

    transitions: int = 0
    recoveries: int = 0
    restores: int = 0
    subsumed: int = 0
    moves_left: bool | None = None  # at the depth bound: whether it has a move (None: not at the bound)
    events: list[StepBroken | Successor] = field(default_factory=list)


class Expander:
    """Expands one world against the search's tables of worlds taken and stopped: the
    live ones in one process, or, in a worker, the tables as the depth started (a
    successor they leave out, the live ones would too: both only grow)."""

    def __init__(self, bounds: Bounds, depth: int, shape_of: Callable[[World], int], queued: Explored,
                 stopped: set[int], subsume: bool) -> None:
        self.bounds, self.depth, self.shape_of = bounds, depth, shape_of
        self.queued, self.stopped, self.subsume = queued, stopped, subsume

    def expand(self, world: World, number: int, *, at: int, made: Memo[int, int], shipped: Memo[int, bool]) -> Batch:
        """Every transition of `world` (queued as `number`, at depth `at`) with its step
        invariants, and each successor not yet taken with its state invariants. `made`
        remembers the keys of worlds this depth made, by the world's own hash: about half
        the transitions make a world another order of the same moves made already, and
        its key (the costliest step) is then looked up, not computed again. `shipped`:
        the keys this depth's expansion sent out with their world, sent again without
        it (and without checking its state again)."""
        batch = Batch()
        if at == self.depth:
            batch.moves_left = any(True for _ in moves(world, self.bounds))
            return batch
        for _label, build in moves(world, self.bounds):
            step = build()
            if step is None:
                continue
            batch.transitions += 1
            batch.recoveries += invariants.recoveries_started(step)
            batch.restores += invariants.restores_applied(step)
            broken = [StepBroken(n, d, step.label) for n, f in invariants.STEP_CHECKS.items()
                      if (d := f(step)) is not None]
            batch.events.extend(broken)
            after = step.after
            shape = made.get(after_hash := hash(after))
            if shape is None:
                shape = made.remember(after_hash, self.shape_of(after))
            budgets = after.budgets
            key = hash((shape, budgets))
            if self.queued.holds(shape, budgets) or key in self.stopped:
                continue
            if self.subsume and self.queued.covers(shape, budgets):
                batch.subsumed += 1
                continue
            if key in shipped:
                batch.events.append(Successor(shape, budgets, key, None, step.label, bool(broken), ()))
                continue
            shipped.remember(key, True)
            failures = () if broken else tuple(state_failures(after))
            batch.events.append(Successor(shape, budgets, key, after, step.label, bool(broken), failures))
        return batch


def check(bounds: Bounds, depth: int, *, stop_at_first: bool = False, max_seconds: float | None = None,
          symmetric: bool = False, subsume: bool = False, visit: Callable[[World], None] | None = None,
          progress: Callable[[Report, int], None] | None = None, progress_every: float = PROGRESS_EVERY,
          in_memory: int = IN_MEMORY, save_dir: Path | None = None, save_every: float = SAVE_EVERY,
          workers: int = 1) -> Report:
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
    (saved_search.py); the report's seconds then count every run;
    `workers`: processes that expand each depth (workers.py), to the same report as
    one; a depth is then saved as it starts, not partway, and `visit` is refused."""
    if workers > 1 and visit is not None:
        raise ValueError("visit sees worlds as the search takes them, in one process: not with workers")
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
            for name, detail in state_failures(first):
                found(name, detail, None, "initial")
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
            expanded = report.per_level[at] - current.size
            report_progress(expanded)
            maybe_save(expanded)

        def report_progress(expanded: int) -> None:
            """Between two worlds of a depth (`expanded` of it done): report progress when due."""
            nonlocal last_progress_at
            if progress is not None and expanded and (
                    last_progress_at is None or time.perf_counter() - last_progress_at >= progress_every):
                report.seconds = time.perf_counter() - started
                progress(report, expanded)
                last_progress_at = time.perf_counter()

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

        def admit(number: int, batch: Batch) -> bool:
            """Take one world's expansion into the search, as a sequential search meets
            it; False once the search is to stop (a violation with `stop_at_first`, or
            the deadline)."""
            report.depth_reached = at
            report.transitions += batch.transitions
            report.recoveries += batch.recoveries
            report.restores += batch.restores
            report.subsumed += batch.subsumed
            if batch.moves_left is not None:
                report.complete = report.complete and not batch.moves_left
            for event in batch.events:
                if isinstance(event, StepBroken):
                    found(event.invariant, event.detail, number, event.label)
                    continue
                if queued.holds(event.shape, event.budgets) or event.key in stopped:
                    continue
                if subsume and queued.covers(event.shape, event.budgets):
                    report.subsumed += 1
                    continue
                # Only a world's first successor of a key ships the world (Expander.expand),
                # and the search has met that one already: it was taken, stopped or subsumed.
                assert event.world is not None, f"{event.label}: a repeated successor the search has not met"
                report.states += 1
                if visit is not None:
                    visit(event.world)
                for name, detail in event.failures:
                    found(name, detail, number, event.label)
                if event.broken or event.failures:
                    stopped.add(event.key)
                    continue
                queued.add(event.shape, event.budgets)
                following.add(event.world, traces.add(number, event.label))
                _count(report.per_level, at + 1)
            if stop_at_first and report.violations:
                return False
            if deadline is not None and time.perf_counter() > deadline:
                report.complete = False
                return False
            return True

        expander = Expander(bounds, depth, shape_of, queued, stopped, subsume)
        while current.size and not (stop_at_first and report.violations):
            report.seconds = time.perf_counter() - started
            if progress is not None and report.per_level[at] == current.size and at > 0:
                progress(report, 0)
                last_progress_at = time.perf_counter()
            if deadline is not None and time.perf_counter() > deadline:
                report.complete = False
                break
            if workers > 1:
                before = report.per_level[at] - current.size  # expanded already: 0 unless resumed partway
                maybe_save(before)
                finished = workers_.expand_level(current, workers, partial(expander.expand, at=at), admit,
                                                 between=lambda expanded: report_progress(before + expanded))
                current.discard()
            else:
                made, shipped = Memo[int, int](MADE_LIMIT), Memo[int, bool](MADE_LIMIT)
                finished = all(admit(number, expander.expand(world, number, at=at, made=made, shipped=shipped))
                               for world, number in current.drain(between=between_worlds))
            if not finished:
                break  # the deadline passed, or stop_at_first found a violation
            current, following, at = following, Level(in_memory), at + 1
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

    def units(self, k: int, n: int) -> Iterator[list[tuple[World, int]]]:
        """For the kth of n processes expanding this depth (workers.py): unit u is the
        uth BLOCK of worlds held in memory, then the uth block on disk, and this yields
        the units u = k mod n, in order, leaving the level as it was (whole blocks: a
        world's successors and its siblings share most of what the memos keep). The
        file is read by position: its offset is shared with the forked processes."""
        u = 0
        held = iter(self._held)
        while block := list(itertools.islice(held, BLOCK)):
            if u % n == k:
                yield block
            u += 1
        if self._file is None:
            return
        fd, at = self._file.fileno(), self._read_at
        while len(head := os.pread(fd, 4, at)) == 4:
            size = int.from_bytes(head, "little")
            if u % n == k:
                yield _unrecord(os.pread(fd, size, at + 4))
            at, u = at + 4 + size, u + 1

    def ready(self) -> None:
        """Every world queued in memory or in a block written out to the file (before a
        fork: a worker reads the file itself, past this process's buffer)."""
        self._spill()
        if self._file is not None:
            self._file.flush()

    def discard(self) -> None:
        """Let every world go (workers expanded them)."""
        self._held.clear()
        self._block = []
        if self._file is not None:
            self._file.close()
            self._file = None
        self.size = 0

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
        self._held.extend(_unrecord(self._file.read(int.from_bytes(size, "little"))))
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


def _unrecord(record: bytes) -> list[tuple[World, int]]:
    """A block of queued worlds from a record's bytes past its length (_record's inverse)."""
    blocks: list[tuple[World, int]] = pickle.loads(zlib.decompress(record))
    return blocks


def _count(per_level: list[int], level: int) -> None:
    per_level.extend([0] * (level + 1 - len(per_level)))
    per_level[level] += 1


def state_failures(world: World) -> list[tuple[str, str]]:
    """Every state invariant the world breaks, with what it saw (a world that breaks
    one is not expanded)."""
    view = view_of(world.records, GROUP)
    return [(name, detail) for name, f in invariants.STATE_CHECKS.items() if (detail := f(world, view)) is not None]
