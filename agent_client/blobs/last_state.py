"""The last state a store wrote or read, kept to spare the next put the work on what
did not change.

Only an immutable `bytes` is kept (a reference, never a copy), so the bytes cannot
change after they were cut and hashed. Nothing is assumed: every reuse is decided
by comparing bytes (a memcmp, several times faster than SHA-256).

* **The prefix both states share** (in whole PREFIX_STEPs): the whole-state hash
  resumes from its running state after that prefix, and the cut points inside it are
  the old ones: FastCDC starts afresh at each cut, so a cut depends only on the bytes
  from the previous cut on, and chunking resumes at the last old cut inside the prefix.
* **A chunk equal to the one at the same place** in the last state takes its digest
  without being hashed (equal bytes have equal digests).

A 1%-changed 64 MiB state then hashes its changed chunks and the whole state from
the change on, instead of all of it twice; an append, little more than the tail.
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

from agent_client.blobs import chunking
from agent_client.blobs.chunking import Buffer
from agent_client.blobs.digests import PREFIX_STEP, Bounds, StateDigest
from agent_client.blobs.manifest import Manifest


@dataclass(frozen=True)
class KnownState:
    data: bytes
    cuts: Sequence[Bounds]  # the chunks' bounds, in order
    digests: Mapping[Bounds, str]  # each chunk's digest by its bounds
    prefixes: Sequence["hashlib._Hash"]  # StateDigest.prefixes of `data`

    @classmethod
    def of(cls, data: Buffer, manifest: Manifest, whole: StateDigest) -> "KnownState | None":
        """The state `manifest` describes (`whole` its digest), if it can be kept without
        copying it and was cut as this version cuts (its cuts are reused)."""
        if (type(data) is not bytes or len(data) != manifest.size or whole.sha256 != manifest.sha256
                or manifest.chunking != chunking.ALGORITHM):
            return None
        ends = list(itertools.accumulate(ref.size for ref in manifest.chunks))
        cuts = list(zip([0, *ends[:-1]], ends))
        return cls(data, cuts, {cut: ref.digest for cut, ref in zip(cuts, manifest.chunks)}, whole.prefixes)

    def shared_prefix(self, view: memoryview) -> int:
        """How many leading bytes `view` shares with this state, in whole PREFIX_STEPs."""
        steps = 0
        limit = min(len(self.prefixes) - 1, len(view) // PREFIX_STEP)
        while steps < limit and self.data.startswith(view[steps * PREFIX_STEP:(steps + 1) * PREFIX_STEP],
                                                     steps * PREFIX_STEP):
            steps += 1
        return steps * PREFIX_STEP

    def hashed_prefix(self, shared: int) -> Sequence["hashlib._Hash"]:
        """The whole hash's running states over the first `shared` bytes (a shared_prefix)."""
        return self.prefixes[:shared // PREFIX_STEP + 1]

    def cut(self, view: memoryview, shared: int) -> list[Bounds]:
        """chunking.chunk_bounds(view), given that its first `shared` bytes are this state's."""
        # The last chunk ended where the state did, not where its bytes said: cut again.
        kept = min(bisect.bisect_right(self.cuts, shared, key=lambda cut: cut[1]), len(self.cuts) - 1)
        resume = self.cuts[kept - 1][1] if kept > 0 else 0
        return [*self.cuts[:kept], *((start + resume, end + resume)
                                     for start, end in chunking.chunk_bounds(view[resume:]))]

    def digest(self, view: memoryview, start: int, end: int, shared: int = 0) -> str | None:
        """The digest of view[start:end] if the same bytes stood at the same place here
        (known without comparing inside the first `shared` bytes, a shared_prefix)."""
        digest = self.digests.get((start, end))
        if digest is not None and (end <= shared or self.data.startswith(view[start:end], start)):
            return digest
        return None
