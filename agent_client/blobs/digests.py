"""The SHA-256 digests a checkpoint needs: the whole state's and each chunk's.

The whole state's digest is what the coordinator records and what restore checks
the reassembled state against, so it stays the plain SHA-256 of the state (any
reader can check it without this library). It does not depend on where the chunks
are cut, so it starts before the chunker and runs beside it and the chunk hashing.
SHA-256 reads its input front to back, so its running state after the first n bytes
depends on those bytes alone: a copy is kept every PREFIX_STEP bytes (StateDigest),
from which a later state that begins with the same bytes resumes (last_state.py).

A chunk's digest is its name and what a read checks the chunk against. Chunks are
hashed on the store's pool a few batches ahead of the writer, in state order, so the
pack is written while later chunks are hashed, not after all of them.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import deque
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from typing import Callable, Generator, Sequence

from agent_client.blobs.chunking import Buffer

Bounds = tuple[int, int]
# Chunks are hashed in batches of at least MIN_BATCH (a task per 80 KiB chunk costs
# about as much in hand-offs as hashing it) and at most MAX_BATCHES per state (the
# first batch, which the writer waits for, stays small).
MIN_BATCH = 16
MAX_BATCHES = 32
# The whole-state hash keeps a copy of its running state every PREFIX_STEP bytes: a
# few hundred bytes per MiB of state, and at most a MiB hashed again before a change.
PREFIX_STEP = 1024 * 1024


def sha256_hex(data: Buffer) -> str:
    """hashlib releases the GIL on large buffers, so this runs beside other threads."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class StateDigest:
    """A state's SHA-256 and the hash's running state after each whole PREFIX_STEP of
    it (`prefixes[i]` has read the first i * PREFIX_STEP bytes; never updated, only copied)."""
    sha256: str
    prefixes: Sequence["hashlib._Hash"]


def state_digest(view: Buffer, prefixes: Sequence["hashlib._Hash"] = ()) -> StateDigest:
    """The SHA-256 of `view`, given the running states of a prefix of it already hashed
    (`prefixes`, as StateDigest holds them: the caller vouches that `view` begins
    with the bytes they have read); none: from its first byte."""
    view = memoryview(view).cast("B")
    saved = list(prefixes) or [hashlib.sha256()]
    hasher = saved[-1].copy()
    for at in range((len(saved) - 1) * PREFIX_STEP, len(view), PREFIX_STEP):
        hasher.update(view[at:at + PREFIX_STEP])
        if at + PREFIX_STEP <= len(view):
            saved.append(hasher.copy())
    return StateDigest(hasher.hexdigest(), tuple(saved))


def chunk_digests(view: memoryview, bounds: list[Bounds], pool: Executor, ahead: int,
                  known: Callable[[int, int], str | None] | None = None) -> Generator[str, None, None]:
    """The SHA-256 of every chunk, in order, hashed on `pool` at most `ahead` batches
    ahead of the caller (more than the cores only delays the first batch); `known`
    gives the digest of a chunk whose bytes it has seen, or None. Closing the iterator
    early cancels the batches not started and waits for the running ones: no task
    outlives the put whose buffer it reads."""
    def digests(batch: list[Bounds]) -> list[str]:
        return [(known and known(start, end)) or sha256_hex(view[start:end]) for start, end in batch]

    step = max(MIN_BATCH, -(-len(bounds) // MAX_BATCHES))
    batches = iter([bounds[i:i + step] for i in range(0, len(bounds), step)])
    if len(bounds) <= step:  # one batch: a task would only add a thread hand-off
        yield from digests(next(batches, []))
        return
    running: deque[Future[list[str]]] = deque(pool.submit(digests, b) for b in itertools.islice(batches, ahead))
    try:
        while running:
            done = running.popleft().result()
            running.extend(pool.submit(digests, b) for b in itertools.islice(batches, 1))
            yield from done
    finally:
        for future in running:
            future.cancel()
        wait(running)
