"""Savepoints: which checkpoints a named consistent moment of a group holds, and
which checkpoints the group's savepoints keep from garbage collection."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from coordinator.core import queries
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.model import Group, Mode, SavedCheckpoint, Savepoint
from coordinator.core.recovery_plan import max_consistent_cut
from coordinator.core.state import State


def cut(state: State, group: Group) -> tuple[int, tuple[SavedCheckpoint, ...]]:
    """(the epoch, the checkpoints) a savepoint taken now holds, by agent id.

    A coordinated group's consistent global checkpoints are its stable epochs: the
    last one. Any other group's is the maximum consistent cut of its stable
    checkpoints (the recovery line if every agent failed now), over the agents
    garbage collection considers (all but those that left). Refused with
    NO_CONSISTENT_CUT when that holds no checkpoint at all."""
    name = group.spec.name
    if group.spec.mode is Mode.COORDINATED:
        saved = tuple(SavedCheckpoint(a.agent_id, cp.index) for a in state.agents(name)
                      for cp in state.checkpoints(name, a.agent_id) if cp.stable and cp.epoch == group.stable_epoch)
        if not group.stable_epoch or not saved:
            raise Rejection.because(ReasonCode.NO_CONSISTENT_CUT,
                                    f"group {name!r} has no stable epoch yet: start one and let every member commit")
        return group.stable_epoch, saved
    inputs = queries.recovery_inputs(state, name, ())
    line = max_consistent_cut(inputs.usable, inputs.dependencies)
    if not any(line.values()):
        raise Rejection.because(ReasonCode.NO_CONSISTENT_CUT,
                                f"group {name!r} has no stable checkpoint in a consistent cut yet: every agent "
                                "would restart from its initial state")
    return 0, tuple(SavedCheckpoint(agent_id, index) for agent_id, index in sorted(line.items()))


def pinned(savepoints: Iterable[Savepoint]) -> dict[str, set[int]]:
    """Per agent, the checkpoint indexes some savepoint holds (an initial state, 0, is no checkpoint)."""
    out: dict[str, set[int]] = defaultdict(set)
    for savepoint in savepoints:
        for saved in savepoint.checkpoints:
            if saved.index:
                out[saved.agent_id].add(saved.index)
    return out


def lowest(savepoints: Iterable[Savepoint]) -> dict[str, int]:
    """Per agent, the lowest index some savepoint holds (0 included: its initial state).
    A restore to a savepoint re-delivers what the agent logged after that point, so its
    rollback floor must not pass it."""
    out: dict[str, int] = {}
    for savepoint in savepoints:
        for saved in savepoint.checkpoints:
            out[saved.agent_id] = min(saved.index, out.get(saved.agent_id, saved.index))
    return out
