"""Retention policies: which stable checkpoints a group keeps for its operators
(roll back to last night, keep the last ten) on top of what recovery needs.

Garbage collection keeps the union of what the recovery line needs, what savepoints
hold and what `selected` returns (state_machine._garbage_collect); this module only
decides the last.
"""
from __future__ import annotations

import math
from typing import Iterable

from coordinator.core.model import Checkpoint, RetentionPolicy


def bucket(at: float, bucket_seconds: float) -> int:
    """The period a commit time falls in: periods start at multiples of
    `bucket_seconds` since the Unix epoch, so every replica draws the same borders."""
    return math.floor(at / bucket_seconds)


def selected(checkpoints: Iterable[Checkpoint], policy: RetentionPolicy, now: float) -> set[int]:
    """The indexes of one agent's checkpoints `policy` keeps at time `now` (the
    collection's replicated time).

    Only stable checkpoints count (the others are no state a recovery may restore).
    keep_last: the newest `keep_last` of them. Time buckets: in each of the last
    `buckets` periods, the current one included, the newest committed in it; one
    committed after `now` (a leader whose clock was ahead) counts as current."""
    stable = sorted((cp for cp in checkpoints if cp.stable), key=lambda cp: cp.index)
    kept = {cp.index for cp in stable[-policy.keep_last:]} if policy.keep_last else set()
    if policy.buckets and policy.bucket_seconds:
        current = bucket(now, policy.bucket_seconds)
        oldest = current - policy.buckets + 1
        newest_per_bucket: dict[int, int] = {}
        for cp in stable:
            period = min(bucket(cp.created_at, policy.bucket_seconds), current)
            if period >= oldest:
                newest_per_bucket[period] = cp.index  # ascending indexes: the last one wins
        kept |= set(newest_per_bucket.values())
    return kept
