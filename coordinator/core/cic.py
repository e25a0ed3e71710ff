"""Communication-induced checkpointing rules (pure): what to piggyback, when to force.

BCS (Briatico, Ciuffoletti, Simoncini; index-based): every checkpoint carries an
index; a message carries its sender's index; a receiver whose index is lower
takes a forced checkpoint at the message's index *before* delivery. Then for any
k, the set of each agent's first checkpoint with index >= k is consistent, so no
checkpoint is useless and there is no domino effect.

The coordinated-mode rule is the same shape with epochs: a message from a higher
epoch forces the receiver's cut for that epoch before delivery.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

_U64 = struct.Struct(">Q")


@dataclass
class BcsState:
    lc: int = 0  # index of the latest checkpoint


def bcs_on_send(state: BcsState) -> bytes:
    return _U64.pack(state.lc)


def bcs_decode(piggyback: bytes) -> int:
    if len(piggyback) != _U64.size:
        raise ValueError(f"BCS piggyback must be {_U64.size} bytes, got {len(piggyback)}")
    return _U64.unpack(piggyback)[0]


def bcs_forced_index(state: BcsState, piggyback: bytes) -> int | None:
    """The index of the checkpoint to force before delivery, or None."""
    lc = bcs_decode(piggyback)
    return lc if lc > state.lc else None


def bcs_on_checkpoint(state: BcsState, forced_index: int | None = None) -> int:
    """Basic checkpoints increment the index; forced ones jump to the message's."""
    state.lc = state.lc + 1 if forced_index is None else forced_index
    return state.lc


def epoch_forces_cut(local_epoch: int, message_epoch: int) -> bool:
    """Coordinated mode: a message sent after its sender's cut for epoch e must not be
    delivered before the receiver's own cut for e."""
    return message_epoch > local_epoch


@dataclass
class FdasState:
    """FDAS (Wang's fixed-dependency-after-send): the transitive dependency vector may
    not change after the first send of an interval; a receive that would change it
    forces a checkpoint first. This gives rollback-dependency trackability, hence no
    useless checkpoint; it forces more checkpoints than BCS but its recovery lines
    are closer to the failure (see `raftpoint simulate`)."""

    me: int
    dv: list[int]
    sent: bool = False

    @classmethod
    def create(cls, me: int, n: int) -> "FdasState":
        dv = [0] * n
        dv[me] = 1  # the current interval
        return cls(me, dv)


def fdas_on_send(state: FdasState) -> bytes:
    state.sent = True
    return struct.pack(f">{len(state.dv)}Q", *state.dv)


def fdas_decode(piggyback: bytes, n: int) -> list[int]:
    if len(piggyback) != 8 * n:
        raise ValueError(f"FDAS piggyback for {n} agents must be {8 * n} bytes, got {len(piggyback)}")
    return list(struct.unpack(f">{n}Q", piggyback))


def fdas_must_checkpoint(state: FdasState, piggyback: bytes) -> bool:
    dv = fdas_decode(piggyback, len(state.dv))
    return state.sent and any(m > mine for m, mine in zip(dv, state.dv))


def fdas_on_deliver(state: FdasState, piggyback: bytes) -> None:
    dv = fdas_decode(piggyback, len(state.dv))
    state.dv = [max(a, b) for a, b in zip(state.dv, dv)]


def fdas_on_checkpoint(state: FdasState) -> None:
    state.dv[state.me] += 1
    state.sent = False
