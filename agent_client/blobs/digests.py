"""The SHA-256 digests a checkpoint needs: the whole state's and each chunk's.

The whole state's digest is what the coordinator records and what restore checks
the reassembled state against, so it stays the plain SHA-256 of the state (any
reader can check it without this library). It does not depend on where the chunks
are cut, so it starts before the chunker and runs beside it and the chunk hashing.
SHA-256 reads its input front to back, so its running state after the first n bytes
depends on those bytes alone: a copy is kept every PREFIX_STEP bytes (StateDigest),
from which a later state that begins with the same bytes resumes (last_state.py). A
state in parts is hashed part after part, never joined.

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

Bounds = tuple[int, int]  # a chunk's [start, end) in its part
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


def state_digest(parts: Sequence[Buffer], prefixes: Sequence["hashlib._Hash"] = ()) -> StateDigest:
    """The SHA-256 of the parts back to back (one update per piece: never joined),
    given the running states of a prefix already hashed (`prefixes`, as StateDigest
    holds them: the caller vouches that the parts begin with the bytes they have
    read); none: from the first byte. The running states are kept every PREFIX_STEP
    bytes of the whole, wherever the parts begin and end."""
    saved = list(prefixes) or [hashlib.sha256()]
    hasher = saved[-1].copy()
    hashed = (len(saved) - 1) * PREFIX_STEP  # bytes of the whole the running state has read
    offset = 0  # where the current part begins in the whole
    for part in parts:
        view = memoryview(part).cast("B")
        at = max(0, hashed - offset)
        while at < len(view):
            end = min(len(view), at + PREFIX_STEP - (offset + at) % PREFIX_STEP)
            hasher.update(view[at:end])
            if (offset + end) % PREFIX_STEP == 0:
                saved.append(hasher.copy())
            at = end
        offset += len(view)
    return StateDigest(hasher.hexdigest(), tuple(saved))


def chunk_digests(pieces: Sequence[Buffer], pool: Executor, ahead: int,
                  known: Callable[[int], str | None] | None = None) -> Generator[str, None, None]:
    """The SHA-256 of every chunk (`pieces`, in order), hashed on `pool` at most `ahead`
    batches ahead of the caller (more than the cores only delays the first batch);
    `known` gives the digest of the chunk at an index if its bytes were seen, or None.
    Closing the iterator early cancels the batches not started and waits for the
    running ones: no task outlives the put whose buffers it reads."""
    def digests(batch: range) -> list[str]:
        return [(known and known(index)) or sha256_hex(pieces[index]) for index in batch]

    step = max(MIN_BATCH, -(-len(pieces) // MAX_BATCHES))
    batches = iter([range(i, min(i + step, len(pieces))) for i in range(0, len(pieces), step)])
    if len(pieces) <= step:  # one batch: a task would only add a thread hand-off
        yield from digests(next(batches, range(0)))
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
