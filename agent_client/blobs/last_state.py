"""The last state a store wrote or read, kept to spare the next put the work on what
did not change.

Only an immutable `bytes` is kept (a reference, never a copy), so the bytes cannot
change after they were cut and hashed. Nothing is assumed: every reuse is decided
by comparing bytes (a memcmp, several times faster than SHA-256).

* **The prefix both states share** (in whole PREFIX_STEPs): the whole-state hash
  resumes from its running state after that prefix, and the cut points inside it are
  the old ones: FastCDC starts afresh at each cut, so a cut depends only on the bytes
  from the previous cut on, and chunking resumes at the last old cut inside the prefix.
* **The suffix both states share** (in whole PREFIX_STEPs, counted from the end):
  past the change, once the chunker cuts where an old cut stood (shifted by the
  change in length) inside that suffix, every later cut is the old one shifted, for
  the same reason, and the rest is not cut again.
* **A chunk equal to the one at the same place** in the last state takes its digest
  without being hashed (equal bytes have equal digests).

A state put in parts (store.put) is compared part by part, each with the same part
of the last put: a part's chunks never cross its ends, so a changed first part (a
client section that grew) leaves the next part's cuts and digests where they were.
The whole hash reads the parts in order: it resumes after the parts equal to the last
put's and the shared prefix of the first that is not.

A 1%-changed 64 MiB state then hashes its changed chunks and the whole state from
the change on, instead of all of it twice; an append, little more than the tail.
"""
from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import Mapping, Sequence

from agent_client.blobs import chunking
from agent_client.blobs.chunking import Buffer
from agent_client.blobs.digests import PREFIX_STEP, Bounds, StateDigest
from agent_client.blobs.manifest import Manifest


@dataclass(frozen=True)
class KnownState:
    """One part of the last state (a put's parts are chunked apart: see LastPut)."""
    data: bytes
    cuts: Sequence[Bounds]  # the chunks' bounds in this part, in order
    digests: Mapping[Bounds, str]  # each chunk's digest by its bounds

    def shared_prefix(self, view: memoryview) -> int:
        """How many leading bytes `view` shares with this state, in whole PREFIX_STEPs."""
        steps = 0
        limit = min(len(self.data), len(view)) // PREFIX_STEP
        while steps < limit and self.data.startswith(view[steps * PREFIX_STEP:(steps + 1) * PREFIX_STEP],
                                                     steps * PREFIX_STEP):
            steps += 1
        return steps * PREFIX_STEP

    def cut(self, view: memoryview, shared: int) -> list[Bounds]:
        """chunking.chunk_bounds(view), given that its first `shared` bytes are this state's."""
        # The last chunk ended where the state did, not where its bytes said: cut again.
        kept = min(bisect.bisect_right(self.cuts, shared, key=lambda cut: cut[1]), len(self.cuts) - 1)
        resume = self.cuts[kept - 1][1] if kept > 0 else 0
        # Past the change, a new cut at an old cut's place (shifted by the change in
        # length) inside the suffix both share is followed by the old cuts, shifted.
        shift, suffix_from = len(view) - len(self.data), len(view) - self.shared_suffix(view)
        old_ends = {end: index for index, (_, end) in enumerate(self.cuts)}

        def back_in_step(end: int) -> bool:
            return resume + end >= suffix_from and resume + end - shift in old_ends

        cut = [(start + resume, end + resume)
               for start, end in chunking.chunk_bounds(view[resume:], stop_after=back_in_step)]
        rest = [] if not cut or cut[-1][1] == len(view) else self.cuts[old_ends[cut[-1][1] - shift] + 1:]
        return [*self.cuts[:kept], *cut, *((start + shift, end + shift) for start, end in rest)]

    def shared_suffix(self, view: memoryview) -> int:
        """How many trailing bytes `view` shares with this state, in whole PREFIX_STEPs."""
        steps = 0
        limit = min(len(self.data), len(view)) // PREFIX_STEP
        while steps < limit and self.data.endswith(view[len(view) - (steps + 1) * PREFIX_STEP:
                                                        len(view) - steps * PREFIX_STEP],
                                                   0, len(self.data) - steps * PREFIX_STEP):
            steps += 1
        return steps * PREFIX_STEP

    def digest(self, view: memoryview, start: int, end: int, shared: int = 0) -> str | None:
        """The digest of view[start:end] if the same bytes stood at the same place here
        (known without comparing inside the first `shared` bytes, a shared_prefix)."""
        digest = self.digests.get((start, end))
        if digest is not None and (end <= shared or self.data.startswith(view[start:end], start)):
            return digest
        return None


@dataclass(frozen=True)
class LastPut:
    """The last state as the parts it was put in (None: a part not kept, e.g. mutable),
    and the whole hash's running states (StateDigest.prefixes of all parts back to back)."""
    parts: Sequence[KnownState | None]
    prefixes: Sequence["hashlib._Hash"]

    @classmethod
    def of(cls, parts: Sequence[Buffer], manifest: Manifest, whole: StateDigest) -> "LastPut | None":
        """The state `manifest` describes (`whole` its digest), stored from `parts`, if it
        was cut as this version cuts (its cuts are reused). Only an immutable `bytes`
        part is kept, by reference."""
        if (sum(memoryview(part).nbytes for part in parts) != manifest.size or whole.sha256 != manifest.sha256
                or manifest.chunking != chunking.ALGORITHM):
            return None
        refs = iter(manifest.chunks)
        known: list[KnownState | None] = []
        for part in parts:
            length, end = memoryview(part).nbytes, 0
            cuts: dict[Bounds, str] = {}
            while end < length and (ref := next(refs, None)) is not None:
                start, end = end, end + ref.size
                cuts[start, end] = ref.digest
            if end != length:  # a chunk across a part's end: not cut as the parts were
                return None
            known.append(KnownState(part, list(cuts), cuts) if type(part) is bytes and cuts else None)
        return cls(tuple(known), whole.prefixes)

    def part(self, index: int) -> KnownState | None:
        return self.parts[index] if index < len(self.parts) else None

    def shared_prefixes(self, views: Sequence[memoryview]) -> list[int]:
        """For each part, how many leading bytes it shares with the same part here."""
        return [0 if (known := self.part(index)) is None else known.shared_prefix(view)
                for index, view in enumerate(views)]

    def hashed_prefix(self, views: Sequence[memoryview], shared: Sequence[int]) -> Sequence["hashlib._Hash"]:
        """The whole hash's running states over the bytes the parts share with the last
        put's from the first byte on (`shared`: shared_prefixes(views)): every part up to
        the first that differs, and that one's shared prefix."""
        same = 0
        for index, view in enumerate(views):
            known = self.part(index)
            if known is None:
                break
            same += shared[index]
            if len(view) != len(known.data) or not known.data.startswith(view[shared[index]:], shared[index]):
                break
            same += len(view) - shared[index]
        return self.prefixes[:min(same // PREFIX_STEP + 1, len(self.prefixes))]
