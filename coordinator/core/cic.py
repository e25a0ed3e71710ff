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
from functools import lru_cache

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


def is_channel_state(local_epoch: int, message_epoch: int) -> bool:
    """Coordinated mode (Lai-Yang): a message sent before its sender's cut for the
    receiver's current epoch, delivered after the receiver's cut, is in transit across
    the cut. The receiver logs it with its checkpoint so a restore can re-deliver it."""
    return message_epoch < local_epoch


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


INF_LC = (1 << 63) - 1


@dataclass
class HmnrState:
    """HMNR (Helary, Mostefaoui, Netzer, Raynal): forces a checkpoint only when a
    delivery would complete a Z-path that could make a checkpoint useless.

    Two tests, evaluated before delivery:
    - non-causal Z-paths: since our last checkpoint we sent to k while our clock was
      min_to[k], and the message carries a clock above both that and anything known of k;
    - causal Z-cycles: the message has seen a checkpoint taken after it saw our
      current checkpoint (taken[me] for our current checkpoint number).
    clock is a vector of logical checkpoint clocks (clock[me] plays BCS's lc);
    ckpt and taken track checkpoint counts along causal paths.
    """

    me: int
    clock: list[int]
    ckpt: list[int]
    taken: list[bool]
    sent_to: list[bool]
    min_to: list[int]

    @classmethod
    def create(cls, me: int, n: int) -> "HmnrState":
        return cls(me, [0] * n, [0] * n, [False] * n, [False] * n, [INF_LC] * n)


@lru_cache(maxsize=64)
def _hmnr_struct(n: int) -> struct.Struct:
    return struct.Struct(f">{2 * n}Q{n}?")


def hmnr_on_send(state: HmnrState, to: int) -> bytes:
    if not state.sent_to[to]:
        state.sent_to[to] = True
        state.min_to[to] = state.clock[state.me]
    return _hmnr_struct(len(state.clock)).pack(*state.clock, *state.ckpt, *state.taken)


@lru_cache(maxsize=16)
def hmnr_decode(piggyback: bytes, n: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[bool, ...]]:
    """Cached: the receive test and the delivery decode the same piggyback."""
    if len(piggyback) != 17 * n:
        raise ValueError(f"HMNR piggyback for {n} agents must be {17 * n} bytes, got {len(piggyback)}")
    values = _hmnr_struct(n).unpack(piggyback)
    return values[:n], values[n:2 * n], values[2 * n:]


def hmnr_must_checkpoint(state: HmnrState, sender: int, piggyback: bytes) -> bool:
    clock, ckpt, taken = hmnr_decode(piggyback, len(state.clock))
    me, m_lc = state.me, clock[sender]
    if taken[me] and ckpt[me] == state.ckpt[me]:
        return True
    return any(sent and low < m_lc and mine < m_lc and theirs < m_lc
               for sent, low, mine, theirs in zip(state.sent_to, state.min_to, state.clock, clock))


def hmnr_on_deliver(state: HmnrState, sender: int, piggyback: bytes) -> None:
    clock, ckpt, taken = hmnr_decode(piggyback, len(state.clock))
    me = state.me
    own = max(state.clock[me], clock[sender])
    state.clock = [a if a > b else b for a, b in zip(state.clock, clock)]
    state.clock[me] = own
    mine_ckpt, mine_taken = state.ckpt, state.taken
    for k, (c, t) in enumerate(zip(ckpt, taken)):
        if k != me:
            if c > mine_ckpt[k]:
                mine_ckpt[k], mine_taken[k] = c, t
            elif c == mine_ckpt[k] and t:
                mine_taken[k] = True


def hmnr_on_checkpoint(state: HmnrState) -> None:
    n = len(state.clock)
    state.sent_to = [False] * n
    state.min_to = [INF_LC] * n
    state.taken = [k != state.me for k in range(n)]
    state.clock[state.me] += 1
    state.ckpt[state.me] += 1
