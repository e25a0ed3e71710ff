"""Forks: a savepoint's consistent cut copied into a new group beside the original
(pure; the state machine writes what `plan` returns).

Nothing of the fork is shared with the source group in a way either group's garbage
collection could take away: each checkpoint of the fork reads its state from a copy
of the source checkpoint's manifest, made by the client beforehand (the core does no
I/O), so a collection of either group releases only manifests that group alone
names, and the blob store's chunk sweep keeps every chunk some manifest still names.
A checkpoint held inline (a data: URI, data_uris.py) has no blob to lose: the fork
holds the same URI, checked against the source's digest.

A forked checkpoint keeps its index, epoch and digests: the agent's own protocol
state inside the blob (its CIC rule state, the deliveries it has seen, its sequence
numbers, a coordinated agent's cut epoch) was written at that index and epoch, and a
renumbered checkpoint would contradict it. The fork's epochs go on from the
savepoint's, which is its stable epoch.

The fork's agents are listed but not running (failed, incarnation 0: not yet
registered) so they resume from their checkpoint when they register, as any agent
that is down does. There are no dependency records: the cut is consistent, so no
message received in it was sent outside it; messages in transit across it are not
carried over.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from coordinator.core import data_uris, validation
from coordinator.core.commands import ForkedCheckpoint, ForkGroup
from coordinator.core.errors import ReasonCode, Rejection, shown
from coordinator.core.model import Agent, AgentState, Checkpoint, Epoch, EpochState, Group, Savepoint
from coordinator.core.state import State


@dataclass(frozen=True)
class Fork:
    """Everything the new group starts with."""

    group: Group
    agents: tuple[Agent, ...]  # one per agent of the savepoint, by agent id
    checkpoints: tuple[Checkpoint, ...]  # one per agent the savepoint holds at a checkpoint (index >= 1)
    epoch: Epoch | None  # coordinated groups: the savepoint's epoch, stable


def plan(state: State, cmd: ForkGroup, now: float) -> Fork:
    """The fork `cmd` asks for, or the refusal: GROUP_NOT_FOUND, GROUP_EXISTS,
    SAVEPOINT_NOT_FOUND, or INVALID_FIELD on `copies` when they are not one copy per
    checkpoint of the savepoint."""
    source = state.group(cmd.group)
    if source is None:
        raise Rejection.not_found(f"group {cmd.group!r}", ReasonCode.GROUP_NOT_FOUND)
    if state.group(cmd.into) is not None:
        raise Rejection.because(ReasonCode.GROUP_EXISTS, f"group {cmd.into!r} exists already: a fork creates a "
                                "new group; choose another name, or delete that group first", "into")
    savepoint = state.savepoint(cmd.group, cmd.savepoint)
    if savepoint is None:
        raise Rejection.because(ReasonCode.SAVEPOINT_NOT_FOUND,
                                f"savepoint {cmd.savepoint!r} of group {cmd.group!r} does not exist", "savepoint")
    savepoint = _only(savepoint, cmd.agents)
    checkpoints = _copied(state, savepoint, cmd.copies, cmd.into)
    members = tuple(sorted(s.agent_id for s in savepoint.checkpoints))
    group = Group(spec=dataclasses.replace(source.spec, name=cmd.into), created_at=now, members=members,
                  current_epoch=savepoint.epoch, stable_epoch=savepoint.epoch,
                  retention_policy=source.retention_policy)
    agents = tuple(Agent(cmd.into, s.agent_id, incarnation=0, state=AgentState.FAILED, registered_at=now,
                         last_checkpoint_index=s.index) for s in sorted(savepoint.checkpoints, key=lambda s: s.agent_id))
    epoch = None
    if savepoint.epoch:
        held = tuple(sorted(cp.agent_id for cp in checkpoints))
        epoch = Epoch(cmd.into, savepoint.epoch, EpochState.STABLE, held, held, started_at=now)
    return Fork(group, agents, checkpoints, epoch)


def _only(savepoint: Savepoint, agents: Sequence[str]) -> Savepoint:
    """The part of `savepoint` holding `agents` (all of it when none are named). A part
    of a consistent cut is consistent: what one of them received in it was sent in it."""
    if not agents:
        return savepoint
    held = {s.agent_id for s in savepoint.checkpoints}
    for i, agent_id in enumerate(agents):
        if agent_id not in held:
            raise Rejection.because(ReasonCode.AGENT_NOT_FOUND, f"savepoint {savepoint.name!r} holds no agent "
                                    f"{agent_id!r}", f"agents[{i}]")
    return dataclasses.replace(savepoint, checkpoints=tuple(s for s in savepoint.checkpoints if s.agent_id in agents))


def _copied(state: State, savepoint: Savepoint, copies: Sequence[ForkedCheckpoint], into: str
            ) -> tuple[Checkpoint, ...]:
    """The savepoint's checkpoints as the fork holds them: in group `into`, read from
    their copy, stable, with no parent (the fork has only this checkpoint of each
    agent) and no channel state (messages in transit are not carried over)."""
    by_checkpoint = {(c.agent_id, c.index): (i, c.blob_uri) for i, c in enumerate(copies)}
    held = {(s.agent_id, s.index) for s in savepoint.checkpoints if s.index}
    strays = sorted(by_checkpoint.keys() - held)
    if strays:
        raise Rejection.invalid(f"copies[{by_checkpoint[strays[0]][0]}]",
                                f"savepoint {savepoint.name!r} holds no checkpoint {strays[0][1]} of "
                                f"{strays[0][0]!r} (it holds {shown(sorted(held))})")
    out = []
    for agent_id, index in sorted(held):
        source = state.checkpoint(savepoint.group, agent_id, index)
        if source is None:
            # Savepoints pin their checkpoints against collection: a broken invariant,
            # refused rather than half applied.
            raise Rejection.because(ReasonCode.NO_RESTORE_LINE, f"savepoint {savepoint.name!r} holds checkpoint "
                                    f"{index} of {agent_id!r}, which no longer exists", "savepoint")
        if (agent_id, index) not in by_checkpoint:
            raise Rejection.invalid("copies", f"no copy of checkpoint {index} of {agent_id!r}: every checkpoint of "
                                              "the savepoint needs its manifest copied for the fork")
        i, uri = by_checkpoint[(agent_id, index)]
        if data_uris.is_inline(uri):  # the state itself, which garbage collection never deletes: shared as is
            validation.check_blob_uri(uri, f"copies[{i}].blob_uri", source.sha256, source.size)
        elif uri == source.blob_uri:
            raise Rejection.invalid(f"copies[{i}].blob_uri", "is the source checkpoint's own manifest: the fork "
                                    "needs a copy, or collecting either group would delete the other's state")
        out.append(dataclasses.replace(source, group=into, blob_uri=uri, parent_index=0, channel_state_uri="",
                                       stable=True))
    return tuple(out)
