"""The group's checkpointing rule as one small object per mode, over coordinator.core.cic.

AgentClient asks the same three questions in every mode -- what to piggyback on a
send, whether a receive must be preceded by a checkpoint (and at which index), and
what changes after a delivery or a checkpoint -- so each mode answers them here and
the client has no per-mode branches. The rule's state is saved in every checkpoint
(to_json) because a rollback must restore the protocol state with the agent state:
a vector clock from the future would force needless checkpoints or miss needed ones.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Generic, Sequence, TypeVar

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import cic


class Rule:
    """UNCOORDINATED: nothing piggybacked, nothing forced."""

    def on_send(self, to: str) -> bytes:
        return b""

    def forced_index(self, sender: str, piggyback: bytes, last_index: int) -> int | None:
        """The index of the checkpoint to take before delivering, or None."""
        return None

    def on_deliver(self, sender: str, piggyback: bytes) -> None:
        pass

    def on_checkpoint(self, index: int) -> None:
        pass

    def to_json(self) -> Any:
        return None

    def load_json(self, doc: Any, index: int) -> None:
        pass


class Bcs(Rule):
    def __init__(self) -> None:
        self.state = cic.BcsState()

    def on_send(self, to: str) -> bytes:
        return cic.bcs_on_send(self.state)

    def forced_index(self, sender: str, piggyback: bytes, last_index: int) -> int | None:
        forced = cic.bcs_forced_index(self.state, piggyback)
        return None if forced is None else max(forced, last_index + 1)

    def on_checkpoint(self, index: int) -> None:
        self.state.lc = index

    def load_json(self, doc: Any, index: int) -> None:
        self.state.lc = index


_VectorState = TypeVar("_VectorState", cic.FdasState, cic.HmnrState)


class _Vector(Rule, Generic[_VectorState]):
    """FDAS and HMNR index agents by position in the fixed member list."""

    _cls: type[_VectorState]
    state: _VectorState

    def __init__(self, state_cls: type[_VectorState], agent_id: str, members: Sequence[str]) -> None:
        if agent_id not in members:
            raise ValueError(f"vector CIC rules need the fixed member list, including {agent_id!r}")
        self.members = list(members)
        self._cls = state_cls
        self.state = state_cls.create(self.members.index(agent_id), len(self.members))

    def pos(self, agent: str) -> int:
        return self.members.index(agent)

    def to_json(self) -> Any:
        return dataclasses.asdict(self.state)

    def load_json(self, doc: Any, index: int) -> None:
        """A checkpoint saves the rule as it was when the checkpoint was cut, before
        on_checkpoint: restored, the agent is just past that checkpoint, so the rule is
        moved past it too (a clock one checkpoint behind misses forced checkpoints)."""
        if doc is not None:
            self.state = self._cls(**doc)
            self.on_checkpoint(index)


class Fdas(_Vector[cic.FdasState]):
    def __init__(self, agent_id: str, members: Sequence[str]) -> None:
        super().__init__(cic.FdasState, agent_id, members)

    def on_send(self, to: str) -> bytes:
        return cic.fdas_on_send(self.state)

    def forced_index(self, sender: str, piggyback: bytes, last_index: int) -> int | None:
        return last_index + 1 if cic.fdas_must_checkpoint(self.state, piggyback) else None

    def on_deliver(self, sender: str, piggyback: bytes) -> None:
        cic.fdas_on_deliver(self.state, piggyback)

    def on_checkpoint(self, index: int) -> None:
        cic.fdas_on_checkpoint(self.state)


class Hmnr(_Vector[cic.HmnrState]):
    def __init__(self, agent_id: str, members: Sequence[str]) -> None:
        super().__init__(cic.HmnrState, agent_id, members)

    def on_send(self, to: str) -> bytes:
        return cic.hmnr_on_send(self.state, self.pos(to))

    def forced_index(self, sender: str, piggyback: bytes, last_index: int) -> int | None:
        return last_index + 1 if cic.hmnr_must_checkpoint(self.state, self.pos(sender), piggyback) else None

    def on_deliver(self, sender: str, piggyback: bytes) -> None:
        cic.hmnr_on_deliver(self.state, self.pos(sender), piggyback)

    def on_checkpoint(self, index: int) -> None:
        cic.hmnr_on_checkpoint(self.state)


def rule_for(mode: int, agent_id: str, members: Sequence[str]) -> Rule:
    """Coordinated mode piggybacks the epoch in the envelope itself, so its rule is the
    null one; its cut-before-delivery logic lives in the client (it needs the epoch)."""
    if mode == pb.CIC_BCS:
        return Bcs()
    if mode == pb.CIC_FDAS:
        return Fdas(agent_id, members)
    if mode == pb.CIC_HMNR:
        return Hmnr(agent_id, members)
    return Rule()
