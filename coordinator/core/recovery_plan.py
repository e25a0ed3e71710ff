"""The state machine's use of the recovery-line algorithms.

Turns stored checkpoints and dependency records into a History and back into
rollback targets, without a second recovery-line algorithm.
"""
from __future__ import annotations

import dataclasses
from typing import Collection, Iterable, Mapping, Sequence

from coordinator.core.commands import RollbackTarget
from coordinator.core.history import Dependency, History
from coordinator.core.recovery_line import gc_watermark, recovery_line
from coordinator.core.recovery_line import max_consistent_containing as _containing


def build_history(usable: Mapping[str, Sequence[int]], deps: Iterable[Dependency]) -> History:
    """Dependencies naming agents outside the group are ignored; message ids are
    qualified by sender so two senders' ids can never collide. A message reported
    twice with different receive intervals (a receiver retried a delivery whose report
    had an unknown outcome) counts as received at the earliest: that rolls back at
    least as much as the truth, never less."""
    earliest: dict[tuple[str, str], Dependency] = {}
    for d in deps:
        if d.sender in usable and d.receiver in usable:
            key = (d.sender, d.message_id)
            if key not in earliest or d.receive_interval < earliest[key].receive_interval:
                earliest[key] = d
    known = [dataclasses.replace(d, message_id=f"{d.sender}/{d.message_id}") for d in earliest.values()]
    return History.from_dependencies({a: sorted({0, *cps}) for a, cps in usable.items()}, known)


def plan_recovery(usable: Mapping[str, Sequence[int]], current: Mapping[str, int], deps: Iterable[Dependency],
                  failed: Collection[str]) -> tuple[RollbackTarget, ...]:
    """Rollback targets, sorted by agent, for the agents that must roll back."""
    history = build_history(usable, deps)
    line = recovery_line(history, [a for a in failed if a in usable], usable=history.checkpoints)
    return tuple(RollbackTarget(a, line.cut[a] or 0, intervals_lost(current.get(a, 0), line.cut[a] or 0))
                 for a in sorted(line.rolled_back))


def intervals_lost(last_checkpoint: int, index: int) -> int:
    """The intervals a rollback from an agent whose last checkpoint is `last_checkpoint`
    back to checkpoint `index` undoes, the one in progress included."""
    return max(0, last_checkpoint + 1 - index)


def plan_gc(usable: Mapping[str, Sequence[int]], deps: Iterable[Dependency], retention: int) -> dict[str, int]:
    """Per agent, the oldest checkpoint index to keep."""
    history = build_history(usable, deps)
    return gc_watermark(history, history.checkpoints, retention)


def max_consistent_cut(usable: Mapping[str, Sequence[int]], deps: Iterable[Dependency]) -> dict[str, int]:
    """Per agent, its checkpoint in the newest consistent global checkpoint made of
    `usable` checkpoints alone (0: its initial state): the recovery line if every
    agent failed now."""
    history = build_history(usable, deps)
    line = recovery_line(history, history.checkpoints.keys(), usable=history.checkpoints)
    return {agent: index or 0 for agent, index in line.cut.items()}


def max_consistent_containing(usable: Mapping[str, Sequence[int]], deps: Iterable[Dependency],
                              fixed: Mapping[str, int]) -> dict[str, int] | None:
    """Per agent, its checkpoint in the newest consistent global checkpoint made of
    `usable` checkpoints that contains the `fixed` ones (0: its initial state), or None
    if no consistent global checkpoint contains them all."""
    history = build_history(usable, deps)
    cut = _containing(history, fixed)
    return None if cut is None else {agent: index or 0 for agent, index in cut.items()}
