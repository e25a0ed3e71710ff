"""What the metadata workload believes about its groups and agents.

The belief only serves to build plausible requests (the next checkpoint index, the
open epoch, a retired incarnation for a zombie write); the checker never reads it. It
is brought in line with every answer that says more, and the workload's threads
share it, so every change goes through Beliefs under one lock.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.locks import SharedExclusiveLock


@dataclass
class AgentModel:
    """What the workload believes about one agent; only used to build plausible requests."""

    group: str
    agent: str
    incarnation: int = 0
    retired: list[int] = field(default_factory=list)  # zombie material
    last_index: int = 0  # newest checkpoint believed stored: the next event's interval is last_index + 1
    # The generation its sends are stamped with (DependencyRecord.send_generation): it
    # rises with every registration and rollback, and a send stamped with an older one
    # after the rollback point is refused as undone.
    generation: int = 0
    next_index: int = 1
    epochs_done: set[int] = field(default_factory=set)


@dataclass
class GroupModel:
    name: str
    mode: str
    agents: dict[str, AgentModel]
    lock: SharedExclusiveLock = field(default_factory=SharedExclusiveLock)
    open_epoch: int = 0  # 0: none known to be open
    members: frozenset[str] = frozenset()
    closed_epoch: int = 0

    @property
    def coordinated(self) -> bool:
        return self.mode == "COORDINATED"


class Beliefs:
    """The updates of the models, each atomic with respect to the others."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()

    def adopt_incarnation(self, a: AgentModel, incarnation: int, generation: int = 0) -> None:
        """A newer incarnation retires the one before (and its epochs' commits)."""
        with self._mutex:
            a.generation = max(a.generation, generation)
            if incarnation > a.incarnation:
                if a.incarnation:
                    a.retired.append(a.incarnation)
                a.incarnation = incarnation
                a.epochs_done.clear()

    def take_index(self, a: AgentModel, jump: int = 0) -> int:
        """The index the agent's next checkpoint gets (`jump` skips some, as BCS may)."""
        with self._mutex:
            index = a.next_index + jump
            a.next_index = index + 1
            return index

    def stored(self, a: AgentModel, index: int) -> None:
        with self._mutex:
            a.last_index = index
            a.next_index = max(a.next_index, index + 1)

    def rolled_back(self, a: AgentModel, index: int, generation: int) -> None:
        """A rollback order was obeyed: later sends restart after `index`, in `generation`."""
        with self._mutex:
            a.last_index = index
            a.next_index = max(a.next_index, index + 1)
            a.generation = max(a.generation, generation)

    def refresh(self, g: GroupModel, r: pb.GetGroupResponse) -> None:
        """Bring the model in line with a GetGroup answer (after a refusal, a recovery, a retry)."""
        for agent in r.agents:
            a = g.agents.get(agent.agent_id)
            if a is not None and agent.state == pb.AGENT_ALIVE:
                self.adopt_incarnation(a, agent.incarnation, agent.generation)
                with self._mutex:
                    a.next_index = max(a.next_index, agent.last_checkpoint_index + 1)
        if g.coordinated:
            current = next((e for e in r.recent_epochs if e.epoch == r.group.current_epoch), None)
            with self._mutex:
                if current is not None and current.state == pb.EPOCH_STARTED:
                    g.open_epoch, g.members = current.epoch, frozenset(current.members)
                    for agent_id in current.committed:
                        if agent_id in g.agents:
                            g.agents[agent_id].epochs_done.add(current.epoch)
                else:
                    g.open_epoch = 0
                    g.closed_epoch = max(g.closed_epoch, r.group.current_epoch)

    def epoch_started(self, g: GroupModel, epoch: pb.Epoch) -> None:
        with self._mutex:
            g.open_epoch, g.members = epoch.epoch, frozenset(epoch.members)

    def epoch_stable(self, g: GroupModel, epoch: int) -> None:
        with self._mutex:
            g.open_epoch, g.closed_epoch = 0, max(g.closed_epoch, epoch)


__all__ = ["AgentModel", "Beliefs", "GroupModel"]
