"""CIC protocols never produce a useless checkpoint; BCS equal indexes form consistent cuts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import cic
from coordinator.core import recovery_line as rl
from coordinator.core.history import EventLog, History
from tests.oracle import brute_force as bf


@st.composite
def bcs_histories(draw) -> tuple[History, int]:
    n = draw(st.integers(2, 4))
    agents = [f"p{i}" for i in range(n)]
    log, states = EventLog(agents), {a: cic.BcsState() for a in agents}
    in_flight: list[tuple[str, str, bytes]] = []
    forced = 0
    for step in range(draw(st.integers(0, 20))):
        agent = agents[draw(st.integers(0, n - 1))]
        op = draw(st.sampled_from(("send", "receive", "checkpoint")))
        if op == "checkpoint" and states[agent].lc < 4:
            log.checkpoint(agent, cic.bcs_on_checkpoint(states[agent]))
        elif op == "send":
            to = agents[draw(st.integers(0, n - 1))]
            if to != agent:
                log.send(agent, f"m{step}")
                in_flight.append((f"m{step}", to, cic.bcs_on_send(states[agent])))
        elif op == "receive" and in_flight:
            mid, to, piggyback = in_flight.pop(draw(st.integers(0, len(in_flight) - 1)))
            index = cic.bcs_forced_index(states[to], piggyback)
            if index is not None:
                log.checkpoint(to, cic.bcs_on_checkpoint(states[to], index))
                forced += 1
            log.receive(to, mid)
    return log.history(), forced


@settings(max_examples=400, deadline=None)
@given(bcs_histories())
def test_bcs_checkpoints_are_useful_and_equal_indexes_consistent(case) -> None:
    history, _ = case
    assert rl.useless_checkpoints(history) == set()
    every = {(a, c) for a, cps in history.checkpoints.items() for c in cps}
    assert bf.useful(history) >= every
    top = max(c for cps in history.checkpoints.values() for c in cps)
    for k in range(top + 1):
        cut = {a: next((c for c in cps if c >= k), None) for a, cps in history.checkpoints.items()}
        assert bf.consistent(history, cut), (k, cut)


def test_bcs_piggyback_is_validated() -> None:
    import pytest

    with pytest.raises(ValueError, match="8 bytes"):
        cic.bcs_decode(b"\x00")


@dataclass(frozen=True)
class VectorProtocol:
    """The hooks of a vector-piggyback CIC protocol, so one generator drives each."""

    create: Callable[[int, int], object]
    send: Callable[[object, int], bytes]
    must_checkpoint: Callable[[object, int, bytes], bool]
    deliver: Callable[[object, int, bytes], None]
    checkpoint: Callable[[object], None]


FDAS = VectorProtocol(cic.FdasState.create, lambda s, to: cic.fdas_on_send(s),
                      lambda s, frm, pb: cic.fdas_must_checkpoint(s, pb), lambda s, frm, pb: cic.fdas_on_deliver(s, pb),
                      cic.fdas_on_checkpoint)
HMNR = VectorProtocol(cic.HmnrState.create, cic.hmnr_on_send, cic.hmnr_must_checkpoint, cic.hmnr_on_deliver,
                      cic.hmnr_on_checkpoint)


@st.composite
def protocol_histories(draw, protocol: VectorProtocol) -> History:
    n = draw(st.integers(2, 4))
    agents = [f"p{i}" for i in range(n)]
    log, states = EventLog(agents), [protocol.create(i, n) for i in range(n)]
    in_flight: list[tuple[str, int, int, bytes]] = []
    for step in range(draw(st.integers(0, 24))):
        i = draw(st.integers(0, n - 1))
        op = draw(st.sampled_from(("send", "receive", "checkpoint")))
        if op == "checkpoint" and log.interval(agents[i]) < 5:
            protocol.checkpoint(states[i])
            log.checkpoint(agents[i])
        elif op == "send":
            to = draw(st.integers(0, n - 1))
            if to != i:
                log.send(agents[i], f"m{step}")
                in_flight.append((f"m{step}", i, to, protocol.send(states[i], to)))
        elif op == "receive" and in_flight:
            mid, frm, to, piggyback = in_flight.pop(draw(st.integers(0, len(in_flight) - 1)))
            if protocol.must_checkpoint(states[to], frm, piggyback):
                protocol.checkpoint(states[to])
                log.checkpoint(agents[to])
            protocol.deliver(states[to], frm, piggyback)
            log.receive(agents[to], mid)
    return log.history()


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(st.data())
def test_fdas_and_hmnr_checkpoints_are_all_useful(data) -> None:
    for protocol in (FDAS, HMNR):
        history = data.draw(protocol_histories(protocol))
        assert rl.useless_checkpoints(history) == set()
        every = {(a, c) for a, cps in history.checkpoints.items() for c in cps}
        assert bf.useful(history) >= every


def test_bcs_forces_where_hmnr_does_not() -> None:
    """p0 and p1 each checkpoint once, p0 once more, then p0 sends to p1."""
    b0, b1 = cic.BcsState(), cic.BcsState()
    h0, h1 = cic.HmnrState.create(0, 2), cic.HmnrState.create(1, 2)
    for _ in range(2):
        cic.bcs_on_checkpoint(b0)
        cic.hmnr_on_checkpoint(h0)
    cic.bcs_on_checkpoint(b1)
    cic.hmnr_on_checkpoint(h1)
    assert cic.bcs_forced_index(b1, cic.bcs_on_send(b0)) == 2
    assert not cic.hmnr_must_checkpoint(h1, 0, cic.hmnr_on_send(h0, 1))


def test_hmnr_detects_the_causal_z_cycle() -> None:
    """q sends m1 to p; p checkpoints and sends m2 back to q in q's same interval."""
    p, q = cic.HmnrState.create(0, 2), cic.HmnrState.create(1, 2)
    m1 = cic.hmnr_on_send(q, 0)
    assert not cic.hmnr_must_checkpoint(p, 1, m1)
    cic.hmnr_on_deliver(p, 1, m1)
    cic.hmnr_on_checkpoint(p)
    assert cic.hmnr_must_checkpoint(q, 0, cic.hmnr_on_send(p, 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=20))
def test_epoch_rule_and_channel_state_partition_every_delivery(deliveries) -> None:
    """Each delivery is exactly one of: same epoch, force a cut first, or channel state."""
    for local, sent in deliveries:
        outcomes = [cic.epoch_forces_cut(local, sent), cic.is_channel_state(local, sent), local == sent]
        assert outcomes.count(True) == 1
