"""Which messages an agent has delivered, exactly, in space that does not grow with traffic.

A message is named by (sender, sender's generation, sequence number in the sender ->
receiver channel). Within one generation a sender numbers each channel 1, 2, 3, ...
from the value its checkpoint restored, and a generation never repeats (the
coordinator bumps it on every registration and rollback), so the numbers a receiver
sees per (sender, generation) are dense. Kept as sorted disjoint ranges, the set costs
one range per gap -- a message still in flight, or one that was never sent on -- not
one entry per message, and it answers "already delivered?" exactly: no window of
recent ids that an old duplicate could slip past.

The set is part of the receiver's checkpoint and rolls back with it: after a rollback
to checkpoint c, messages received after c are no longer delivered and may (must) be
delivered again.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any


class DeliveredSet:
    def __init__(self) -> None:
        # (sender, generation) -> (range starts, range ends), inclusive, sorted, disjoint, non-adjacent
        self._ranges: dict[tuple[str, int], tuple[list[int], list[int]]] = {}

    def __contains__(self, key: tuple[str, int, int]) -> bool:
        sender, generation, seq = key
        ranges = self._ranges.get((sender, generation))
        if ranges is None:
            return False
        starts, ends = ranges
        i = bisect_right(starts, seq) - 1
        return i >= 0 and ends[i] >= seq

    def add(self, key: tuple[str, int, int]) -> bool:
        """Record a delivery; False if it was already recorded."""
        sender, generation, seq = key
        starts, ends = self._ranges.setdefault((sender, generation), ([], []))
        i = bisect_right(starts, seq) - 1
        if i >= 0 and ends[i] >= seq:
            return False
        joins_left = i >= 0 and ends[i] == seq - 1
        joins_right = i + 1 < len(starts) and starts[i + 1] == seq + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = seq
        elif joins_right:
            starts[i + 1] = seq
        else:
            starts.insert(i + 1, seq)
            ends.insert(i + 1, seq)
        return True

    def __len__(self) -> int:
        return sum(e - s + 1 for starts, ends in self._ranges.values() for s, e in zip(starts, ends))

    def ranges(self) -> int:
        """How many ranges are stored: what the set costs."""
        return sum(len(starts) for starts, _ in self._ranges.values())

    def to_json(self) -> list[Any]:
        return [[sender, generation, [[s, e] for s, e in zip(*self._ranges[(sender, generation)])]]
                for sender, generation in sorted(self._ranges) if self._ranges[(sender, generation)][0]]

    @classmethod
    def from_json(cls, doc: Any) -> "DeliveredSet":
        """Blobs written before this format held a list of id strings: they load as empty."""
        out = cls()
        for item in doc if isinstance(doc, list) else ():
            if isinstance(item, list) and len(item) == 3:
                sender, generation, spans = item
                out._ranges[(str(sender), int(generation))] = ([int(s) for s, _ in spans], [int(e) for _, e in spans])
        return out
