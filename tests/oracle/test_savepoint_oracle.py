"""Savepoints through the state machine against the brute-force definitions.

Random runs of checkpoints, messages and garbage collections, with one savepoint
taken somewhere along the way, are applied to two machines, one of which never
takes the savepoint: the savepoint must be the maximum consistent cut of the
checkpoints at that moment (by enumeration), garbage collection must never delete a
checkpoint it holds, and must delete everything else the twin without it deletes;
nor may a recovery that follows.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import commands as c
from coordinator.core.model import GroupSpec, Mode
from tests.core.test_state_machine import Machine
from tests.oracle import brute_force as bf
from tests.oracle.traffic import Traffic

SETTINGS = settings(max_examples=150, deadline=None)
# Checkpoints twice as likely as the other events, so collections have something to take.
EVENTS = st.lists(st.tuples(st.sampled_from(("send", "receive", "checkpoint", "checkpoint", "gc")),
                            st.integers(0, 3), st.integers(0, 3), st.integers(1, 2)), min_size=4, max_size=40)


class Twins:
    """The same group on two machines; only `with_savepoint` gets savepoint commands."""

    def __init__(self, agents: list[str], mode: Mode) -> None:
        self.with_savepoint, self.without = Machine(), Machine()
        self.agents = agents
        self.both(c.CreateGroup(GroupSpec("g", mode, retention=0)))
        for agent in agents:
            self.both(c.Register("g", agent))

    def both(self, command: c.Command) -> None:
        for machine in (self.with_savepoint, self.without):
            machine.ok(command)

    def remaining(self, machine: Machine) -> set[tuple[str, int]]:
        return {(a, cp.index) for a in self.agents for cp in machine.state.checkpoints("g", a)}


@SETTINGS
@given(st.integers(2, 4), st.sampled_from((Mode.UNCOORDINATED, Mode.CIC_BCS)), EVENTS, st.floats(0.2, 0.8))
def test_savepoint_is_the_maximum_consistent_cut_and_gc_keeps_it(n: int, mode: Mode, events: list,
                                                                   savepoint_at: float) -> None:
    agents = [f"p{i}" for i in range(n)]
    twins = Twins(agents, mode)
    traffic = Traffic(agents, twins.both)
    pinned: set[tuple[str, int]] | None = None
    at = int(len(events) * savepoint_at)
    run = [*events[:at], ("savepoint", 0, 0, 0), *events[at:]]
    for step, (op, who, to, jump) in enumerate(run):
        traffic.step(step, op, who, to, jump)
        if op == "gc":
            twins.both(c.GarbageCollect("g"))
        elif op == "savepoint":
            expected = bf.recovery_line(traffic.log.history(), set(agents))
            result = twins.with_savepoint.run(c.CreateSavepoint("g", "s"))
            if not any(expected.values()):
                assert isinstance(result, c.Failure) and result.reason_code == "NO_CONSISTENT_CUT", result
                continue
            assert isinstance(result, c.SavepointResult), result
            assert {s.agent_id: s.index for s in result.savepoint.checkpoints} == expected
            pinned = {(s.agent_id, s.index) for s in result.savepoint.checkpoints if s.index}
    twins.both(c.GarbageCollect("g"))
    kept, twin_kept = twins.remaining(twins.with_savepoint), twins.remaining(twins.without)
    assert kept == twin_kept | (pinned or set()), (sorted(kept), sorted(twin_kept), sorted(pinned or ()))
    # A later recovery rolls back to a line at or above the savepoint (it was consistent,
    # and later messages touch later intervals only): it deletes none of its checkpoints.
    twins.with_savepoint.ok(c.DeclareAgentFailed("g", agents[0], 1))
    assert (pinned or set()) <= twins.remaining(twins.with_savepoint)

