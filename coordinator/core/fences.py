"""Rollback fences: which messages of an agent a rollback has undone.

When agent p rolls back to checkpoint k, everything p did in intervals after k is
undone, but its later intervals reuse the numbers k+1, k+2, ... A message therefore
names its send by (generation, interval): p's generation rises with every rollback
order and every registration, and the fence (generation g, index k) says "a send
made in a generation older than g, in an interval after k, never happened". A
receiver that delivered such a message would hold an orphan.

A message is undone if *any* fence newer than its generation has an index below its
interval; fences are kept pruned to the ones that can still decide that:
- a fence whose index is not below a newer fence's index adds nothing (the newer one
  undoes the same sends and more), so it is dropped;
- past MAX_FENCES, the two oldest are merged into one with the newer generation and
  the lower index. That is exact for sends older than both, and conservative (it may
  refuse a valid message) only for a message from between the two generations still
  in flight after MAX_FENCES further rollbacks of its sender.
"""
from __future__ import annotations

from typing import Sequence

from coordinator.core.model import Fence

MAX_FENCES = 64


def add(fences: Sequence[Fence], fence: Fence) -> tuple[Fence, ...]:
    """The pruned fence list after `fence` (the newest) is added."""
    kept = [f for f in fences if f.index < fence.index] + [fence]
    while len(kept) > MAX_FENCES:
        oldest, second = kept[0], kept[1]
        kept[:2] = [Fence(second.agent_id, second.generation, min(oldest.index, second.index))]
    return tuple(kept)


def undoing(fences: Sequence[Fence], generation: int, interval: int) -> Fence | None:
    """The fence that undid a send made in `generation` and `interval`, or None if the
    send still stands."""
    for fence in fences:
        if generation < fence.generation and interval > fence.index:
            return fence
    return None
