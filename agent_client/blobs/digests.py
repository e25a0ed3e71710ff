"""The SHA-256 digests a checkpoint needs: the whole state's and each chunk's.

The whole state's digest is what the coordinator records and what restore checks
the reassembled state against, so it stays the plain SHA-256 of the state (any
reader can check it without this library). It does not depend on where the chunks
are cut, so it starts before the chunker and runs beside it and the chunk hashing.

A chunk's digest is its name and what a read checks the chunk against. Chunks are
hashed on the store's pool a few batches ahead of the writer, in state order, so the
pack is written while later chunks are hashed, not after all of them.

A chunk whose bytes equal, byte for byte and at the same place, a chunk of the last
state the store wrote (KnownState) takes that chunk's digest without being hashed:
equal bytes have equal digests, and comparing costs a fraction of hashing. In a
1%-changed 64 MiB state that leaves the changed chunks to hash, not all 835.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import deque
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from typing import Generator, Mapping

from agent_client.blobs.chunking import Buffer
from agent_client.blobs.manifest import Manifest

Bounds = tuple[int, int]
# Chunks are hashed in batches of at least MIN_BATCH (a task per 80 KiB chunk costs
# about as much in hand-offs as hashing it) and at most MAX_BATCHES per state (the
# first batch, which the writer waits for, stays small).
MIN_BATCH = 16
MAX_BATCHES = 32


def sha256_hex(data: Buffer) -> str:
    """hashlib releases the GIL on large buffers, so this runs beside other threads."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class KnownState:
    """A state whose chunk digests are known, by place. Only an immutable `bytes` is
    kept (a reference, not a copy), so the bytes cannot change after they were hashed."""
    data: bytes
    digests: Mapping[Bounds, str]

    @classmethod
    def of(cls, data: Buffer, manifest: Manifest) -> "KnownState | None":
        """The state `manifest` describes, if it can be kept without copying it."""
        if type(data) is not bytes or len(data) != manifest.size:
            return None
        ends = itertools.accumulate(ref.size for ref in manifest.chunks)
        starts = itertools.chain((0,), itertools.accumulate(ref.size for ref in manifest.chunks))
        return cls(data, {(start, end): ref.digest for start, end, ref in zip(starts, ends, manifest.chunks)})

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
