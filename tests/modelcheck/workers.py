"""One depth of a search expanded by several processes, taken in as one process takes it.

Expanding a world (its transitions through the real core, their invariants, the
symmetric keys of what they make) is nearly all of a search's time, and each world is
expanded alone; taking a successor in (the table of worlds taken, the next depth's
queue, the traces) is a few microseconds. So as a depth starts the search forks
n - 1 workers, which inherit the depth's worlds, the search's tables and its memos as
they stand; of the depth's units (a block of worlds, Level.units) the search expands
units 0, n, 2n, ... itself and the kth worker units k, n + k, ..., each sending its
worlds' Batches down a pipe. The search takes the batches in the order of the units,
the order one process would have expanded them in, and admits each as it does alone
(explore.check's `admit`): so the states, transitions, levels, violations and their
shortest traces are those of one process. A worker leaves out only successors the
search would leave out too (explore.Expander: the tables only grow), and sends a key
it sent before without its world (the search has met it by then).

A worker's memos go with it as the depth ends; the search's own stay warm for the
next depth's workers. The tables a key reads besides the world (world.BLOBS, each
blob as the model wrote it; replica.answered, each kept answer's command as it was
applied) are filled by the process that takes the step, and come back as a worker
ends (symmetry.learned), for the next depth's workers: a world's blobs and kept
answers were written by the step that made it or by its ancestors' steps, at an
earlier depth or in the process expanding it. So a key computed in a worker is the
key the search computes alone.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import signal
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tests.modelcheck import symmetry
from tests.modelcheck.memo import Memo

if TYPE_CHECKING:
    from tests.modelcheck.explore import Batch, Level

MEMO_LIMIT = 1 << 22  # a process's memo of keys made this depth, and a worker's of keys it shipped
PIPE_BYTES = 1 << 20  # a pipe's buffer: lets a worker run ahead of the unit being taken in
_F_SETPIPE_SZ = 1031
_UNIT_DONE, _DONE, _FAILED = "unit done", "done", "failed"


class WorkerFailed(Exception):
    """A worker raised (its traceback), or ended without a word."""


def expand_level(level: Level, n: int, expand: Callable[..., Batch], admit: Callable[[int, Batch], bool],
                 between: Callable[[int], None] = lambda expanded: None) -> bool:
    """Expand every world of `level`, a share in this process and the rest on n - 1
    forked workers (`expand(world, number, made=..., shipped=...)`), and `admit(number,
    batch)` each in the level's order, `between(expanded)` before each. False as soon
    as `admit` says stop (the workers are then ended); True once every world is in."""
    level.ready()
    readers: list[Connection] = []
    pids: list[int] = []
    try:
        for k in range(1, n):
            reader, writer = Pipe(duplex=False)
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                reader.close()
                _work(level, k, n, expand, writer)
            writer.close()
            _widen(reader)
            readers.append(reader)
            pids.append(pid)
        made, shipped = Memo[int, int](MEMO_LIMIT), Memo[int, bool](MEMO_LIMIT)
        done: dict[Connection, Any] = {}  # what each worker that has no unit left learned
        own = level.units(0, n)
        expanded = 0
        for unit in itertools.count():
            if unit % n == 0:
                block = next(own, None)
                if block is None:
                    break
                batches = ((number, expand(world, number, made=made, shipped=shipped)) for world, number in block)
            else:
                batches = _unit(readers[unit % n - 1], done)
            for number, batch in batches:
                between(expanded)
                if not admit(number, batch):
                    return False
                expanded += 1
        for reader in readers:
            if reader not in done:
                message = _receive(reader)
                if message[0] != _DONE:
                    raise WorkerFailed("a worker sent a world after its last unit")
                done[reader] = message[1]
        for learned in done.values():
            symmetry.relearn(learned)
        return True
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        for reader in readers:
            reader.close()


def _work(level: Level, k: int, n: int, expand: Callable[..., Batch], writer: Connection) -> None:
    """A worker: expand units k, n + k, ... of the level, each world's Batch down the pipe."""
    status = 0
    try:
        made, shipped = Memo[int, int](MEMO_LIMIT), Memo[int, bool](MEMO_LIMIT)
        for block in level.units(k, n):
            for world, number in block:
                writer.send((number, expand(world, number, made=made, shipped=shipped)))
            writer.send((_UNIT_DONE,))
        writer.send((_DONE, symmetry.learned()))
    except BaseException:  # noqa: BLE001 - the search reports it
        status = 1
        try:
            writer.send((_FAILED, traceback.format_exc()))
        except OSError:
            pass  # the search has stopped reading
    finally:
        os._exit(status)  # none of the forking process's cleanup (its temporary files, its handlers)


def _unit(reader: Connection, done: dict[Connection, Any]) -> Iterator[tuple[int, Batch]]:
    """The (number, batch) pairs of a worker's next unit; none if it has no unit left
    (it joins `done`, with what it learned)."""
    while (message := _receive(reader))[0] != _UNIT_DONE:
        if message[0] == _DONE:
            done[reader] = message[1]
            return
        yield message[0], message[1]


def _receive(reader: Connection) -> tuple[Any, ...]:
    try:
        message: tuple[Any, ...] = reader.recv()
    except EOFError:
        raise WorkerFailed("a worker ended without a word (killed?)") from None
    if message[0] == _FAILED:
        raise WorkerFailed(message[1])
    return message


def _widen(reader: Connection) -> None:
    """A larger pipe buffer, where the system allows one (Linux's F_SETPIPE_SZ)."""
    try:
        fcntl.fcntl(reader.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass
