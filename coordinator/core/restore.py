"""Group restores: which consistent global checkpoint a restore goes back to, and what
each member loses on the way (pure; the state machine applies it, a dry run shows it).

A restore is a recovery whose line is chosen by an operator instead of by a failure:
every member that has not left rolls back to its checkpoint on the line, even one
whose last checkpoint is on it, because what it did since is not in that checkpoint
(the coordinator cannot see an agent's volatile state). The line is
- a savepoint's checkpoints (an agent that joined after it goes back to its initial
  state), or
- the newest consistent global checkpoint containing the named stable checkpoints:
  a coordinated group's consistent global checkpoints are its stable epochs, so
  there it is the stable epoch they all belong to; in the other modes it is the
  maximum consistent cut of the stable checkpoints that still exist, kept at the
  named ones.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from coordinator.core import queries
from coordinator.core.commands import RestoreStep, RollbackTarget
from coordinator.core.errors import ReasonCode, Rejection, shown
from coordinator.core.history import Dependency
from coordinator.core.model import Group, Mode, SavedCheckpoint
from coordinator.core.recovery_line import orphans
from coordinator.core.recovery_plan import build_history, intervals_lost, max_consistent_containing
from coordinator.core.state import State


@dataclass(frozen=True)
class RestorePlan:
    """What a restore does, decided from one state; applying it changes nothing else."""

    steps: tuple[RestoreStep, ...]  # one per member that has not left, by agent id
    epoch: int  # coordinated groups: the stable epoch the line is; 0 otherwise

    def targets(self) -> tuple[RollbackTarget, ...]:
        """The rollback targets the recovery machinery orders, as a failure's plan would."""
        return tuple(RollbackTarget(s.agent_id, s.checkpoint_index, s.intervals_lost) for s in self.steps)


def plan(state: State, group: Group, savepoint: str, containing: Sequence[SavedCheckpoint]) -> RestorePlan:
    """The restore of `group` to `savepoint` (a name) or to the line `containing` those
    checkpoints. Raises the refusal otherwise: SAVEPOINT_NOT_FOUND, AGENT_NOT_FOUND,
    NO_RESTORE_LINE, or RESTORE_UNDOES_SAVEPOINT when it would delete a checkpoint
    another savepoint holds (delete that savepoint first: it names a moment the
    restore erases). Chaos seam: `restore-ignores-savepoint` (chaos/planted.py)
    replaces it with one that restores to the newest consistent line instead."""
    name = group.spec.name
    inputs = queries.recovery_inputs(state, name, ())
    if savepoint:
        epoch, line, named = _savepoint_line(state, group, savepoint, inputs.usable, inputs.dependencies)
    else:
        epoch, line = _containing_line(state, group, containing, inputs.usable, inputs.dependencies)
        named = set(line)
    _check_floors(state, name, {a: line[a] for a in named if a in line}, "savepoint" if savepoint else "containing")
    _check_other_savepoints(state, name, savepoint, line)
    sends, receives = _undone(line, inputs.dependencies)
    steps = tuple(RestoreStep(
        agent_id=agent, checkpoint_index=index, intervals_lost=intervals_lost(inputs.current[agent], index),
        checkpoints_lost=tuple(c.index for c in state.checkpoints(name, agent) if c.index > index),
        sends_undone=sends[agent], receives_undone=receives[agent]) for agent, index in sorted(line.items()))
    return RestorePlan(steps, epoch)


def _savepoint_line(state: State, group: Group, name: str, usable: Mapping[str, tuple[int, ...]],
                    deps: Sequence[Dependency]) -> tuple[int, dict[str, int], set[str]]:
    """(its epoch, the line, the members it names: the others joined after it)."""
    found = state.savepoint(group.spec.name, name)
    if found is None:
        raise Rejection.because(ReasonCode.SAVEPOINT_NOT_FOUND,
                                f"savepoint {name!r} of group {group.spec.name!r} does not exist", "savepoint")
    saved = {s.agent_id: s.index for s in found.checkpoints}
    line = {agent: saved.get(agent, 0) for agent in usable}
    gone = sorted((a, i) for a, i in line.items() if i and i not in usable[a])
    if gone:
        # Savepoints pin their checkpoints and every recovery line stays at or above them:
        # this is a broken invariant, refused rather than half applied.
        raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                f"savepoint {name!r} holds checkpoints that no longer exist: {shown(gone)}",
                                "savepoint")
    if group.spec.mode is not Mode.COORDINATED:
        found_orphans = orphans(build_history(usable, deps), line)
        if found_orphans:
            raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                    f"savepoint {name!r} is no longer a consistent cut: message "
                                    f"{found_orphans[0].message_id!r} would be an orphan", "savepoint")
    return found.epoch, line, set(saved)


def _containing_line(state: State, group: Group, containing: Sequence[SavedCheckpoint],
                     usable: Mapping[str, tuple[int, ...]], deps: Sequence[Dependency]) -> tuple[int, dict[str, int]]:
    name = group.spec.name
    fixed = {s.agent_id: s.index for s in containing}
    for i, (agent, index) in enumerate(fixed.items()):
        if agent not in usable:
            raise Rejection.because(ReasonCode.AGENT_NOT_FOUND,
                                    f"agent {agent!r} is not a member of group {name!r}", f"containing[{i}]")
        if index not in usable[agent]:
            raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                    f"agent {agent!r} has no stable checkpoint {index} (stable now: "
                                    f"{shown(list(usable[agent]))})", f"containing[{i}]")
    if group.spec.mode is Mode.COORDINATED:
        epochs = {a: state.checkpoint(name, a, i).epoch for a, i in fixed.items()}  # type: ignore[union-attr]
        if len(set(epochs.values())) != 1:
            raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                    f"the checkpoints belong to different stable epochs {shown(epochs)}: a "
                                    "coordinated group is restored to one epoch", "containing")
        epoch = next(iter(epochs.values()))
        line = {a: next((c.index for c in state.checkpoints(name, a) if c.stable and c.epoch == epoch), 0)
                for a in usable}
        record = state.epoch(name, epoch)
        missing = sorted(a for a in (record.members if record else usable) if a in line and not line[a])
        if record is None or missing:
            raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                    f"epoch {epoch} is no longer whole: " + (
                                        f"the checkpoints of {shown(missing)} in it were collected" if record
                                        else "its record was collected, so its members are unknown")
                                    + "; a savepoint keeps an epoch whole", "containing")
        return epoch, line
    found = max_consistent_containing(usable, deps, fixed)
    if found is None:
        raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                f"no consistent global checkpoint of group {name!r} contains {shown(fixed)}: a "
                                "message received before one of them was sent after another", "containing")
    return 0, found


def _check_floors(state: State, group: str, line: Mapping[str, int], field: str) -> None:
    """Garbage collection let each agent forget what it logged to re-deliver before its
    rollback floor: going back below it would lose messages whose send stands."""
    below = sorted((a, i, floor) for a, i in line.items()
                   if i < (floor := queries.registered_agent(state, group, a).rollback_floor))
    if below:
        agent, index, floor = below[0]
        raise Rejection.because(ReasonCode.NO_RESTORE_LINE,
                                f"the line would take {agent!r} back to {index or 'its initial state'}, below "
                                f"checkpoint {floor} which garbage collection made its oldest", field)


def _check_other_savepoints(state: State, group: str, restoring: str, line: Mapping[str, int]) -> None:
    undone = sorted(sp.name for sp in state.savepoints(group) if sp.name != restoring
                    and any(s.agent_id in line and s.index > line[s.agent_id] for s in sp.checkpoints))
    if undone:
        raise Rejection.because(ReasonCode.RESTORE_UNDOES_SAVEPOINT,
                                f"the restore would delete checkpoints that savepoints {shown(undone)} hold: delete "
                                "them first, or restore to a later line", "savepoint" if restoring else "containing")


def _undone(line: Mapping[str, int], deps: Sequence[Dependency]) -> tuple[Counter[str], Counter[str]]:
    """Per agent, the reported deliveries of its sends, and to it, after its place on the line
    (one pass: this runs on the Raft thread for every restore)."""
    sends: Counter[str] = Counter()
    receives: Counter[str] = Counter()
    for d in deps:
        if d.sender in line and d.send_interval > line[d.sender]:
            sends[d.sender] += 1
        if d.receiver in line and d.receive_interval > line[d.receiver]:
            receives[d.receiver] += 1
    return sends, receives
