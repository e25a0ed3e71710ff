"""The SHA-256 digests a checkpoint needs: the whole state's and each chunk's.

The whole state's digest is what the coordinator records and what restore checks
the reassembled state against, so it stays the plain SHA-256 of the state (any
reader can check it without this library). It does not depend on where the chunks
are cut, so it starts before the chunker and runs beside it and the chunk hashing.
SHA-256 reads its input front to back, so its running state after the first n
bytes depends on those bytes alone: a copy is kept every PREFIX_STEP bytes, and the
next state that begins with the same bytes resumes from the last copy its prefix
still matches instead of hashing that prefix again (an append, or a change near the
end, hashes little more than the new tail).

A chunk's digest is its name and what a read checks the chunk against. Chunks are
hashed on the store's pool a few batches ahead of the writer, in state order, so the
pack is written while later chunks are hashed, not after all of them.

A chunk whose bytes equal, byte for byte and at the same place, a chunk of the last
state the store wrote or read (KnownState) takes that chunk's digest without being hashed:
equal bytes have equal digests, and comparing costs a fraction of hashing. In a
1%-changed 64 MiB state that leaves the changed chunks to hash, not all 835.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import deque
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from typing import Generator, Mapping, Sequence

from agent_client.blobs.chunking import Buffer
from agent_client.blobs.manifest import Manifest

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


def state_digest(view: Buffer, known: "KnownState | None" = None) -> StateDigest:
    """The SHA-256 of `view`, resumed from the longest whole-step prefix it shares with
    the known state (compared byte for byte) instead of hashed from its first byte."""
    view = memoryview(view).cast("B")
    steps = 0
    if known is not None:
        limit = min(len(known.prefixes) - 1, len(view) // PREFIX_STEP)
        while steps < limit and known.data.startswith(view[steps * PREFIX_STEP:(steps + 1) * PREFIX_STEP],
                                                      steps * PREFIX_STEP):
            steps += 1
        prefixes = list(known.prefixes[:steps + 1])
    else:
        prefixes = [hashlib.sha256()]
    hasher = prefixes[-1].copy()
    for at in range(steps * PREFIX_STEP, len(view), PREFIX_STEP):
        hasher.update(view[at:at + PREFIX_STEP])
        if at + PREFIX_STEP <= len(view):
            prefixes.append(hasher.copy())
    return StateDigest(hasher.hexdigest(), tuple(prefixes))


@dataclass(frozen=True)
class KnownState:
    """A state whose digests are known: its chunks' by place, and its whole hash's
    running state by prefix. Only an immutable `bytes` is kept (a reference, not a
    copy), so the bytes cannot change after they were hashed."""
    data: bytes
    digests: Mapping[Bounds, str]
    prefixes: Sequence["hashlib._Hash"]

    @classmethod
    def of(cls, data: Buffer, manifest: Manifest, whole: StateDigest) -> "KnownState | None":
        """The state `manifest` describes (`whole` its digest), if it can be kept without copying it."""
        if type(data) is not bytes or len(data) != manifest.size or whole.sha256 != manifest.sha256:
            return None
        ends = itertools.accumulate(ref.size for ref in manifest.chunks)
        starts = itertools.chain((0,), itertools.accumulate(ref.size for ref in manifest.chunks))
        return cls(data, {(start, end): ref.digest for start, end, ref in zip(starts, ends, manifest.chunks)},
                   whole.prefixes)

    def digest(self, view: memoryview, start: int, end: int) -> str | None:
        """The digest of view[start:end] if the same bytes stood at the same place here."""
        digest = self.digests.get((start, end))
        if digest is not None and self.data.startswith(view[start:end], start):  # a memcmp, no copy
            return digest
        return None


def chunk_digests(view: memoryview, bounds: list[Bounds], pool: Executor, ahead: int,
                  known: KnownState | None) -> Generator[str, None, None]:
    """The SHA-256 of every chunk, in order, hashed on `pool` at most `ahead` batches
    ahead of the caller (more than the cores only delays the first batch). Closing the iterator early cancels the batches not started and
    waits for the running ones: no task outlives the put whose buffer it reads."""
    def digests(batch: list[Bounds]) -> list[str]:
        return [(known and known.digest(view, start, end)) or sha256_hex(view[start:end]) for start, end in batch]

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
