"""Group restores through the state machine against the brute-force definitions.

Random runs of checkpoints, messages and garbage collections: a restore to the
checkpoints it must contain goes back to the newest consistent cut, by enumeration,
of the checkpoints that still exist (or is refused, changing nothing, when there is
none); a restore to a savepoint taken along the way goes back to exactly the
savepoint, which is a consistent cut of the whole history.
"""
from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from coordinator.core import commands as c
from coordinator.core.history import History
from coordinator.core.model import GroupSpec, Mode, OrderKind, SavedCheckpoint
from tests.core.test_state_machine import Machine
from tests.oracle import brute_force as bf
from tests.oracle.traffic import Traffic

SETTINGS = settings(max_examples=150, deadline=None)
EVENTS = st.lists(st.tuples(st.sampled_from(("send", "receive", "checkpoint", "checkpoint", "gc")),
                            st.integers(0, 3), st.integers(0, 3), st.integers(1, 2)), min_size=4, max_size=36)
MODES = st.sampled_from((Mode.UNCOORDINATED, Mode.CIC_BCS))


class Run:
    """One group on a machine, with the same history kept as an EventLog for the oracle."""

    def __init__(self, n: int, mode: Mode) -> None:
        self.m = Machine()
        self.agents = [f"p{i}" for i in range(n)]
        self.traffic = Traffic(self.agents, self.m.ok)
        self.log = self.traffic.log
        self.m.ok(c.CreateGroup(GroupSpec("g", mode, retention=0)))
        for agent in self.agents:
            self.m.register("g", agent)

    def play(self, events: list, tag: str) -> None:
        for step, (op, who, to, jump) in enumerate(events):
            if op == "gc":
                self.m.ok(c.GarbageCollect("g"))
            else:
                self.traffic.step(step, op, who, to, jump, tag)

    def existing(self) -> History:
        """The history with only the checkpoints the machine still holds."""
        cps = {a: [cp.index for cp in self.m.state.checkpoints("g", a)] for a in self.agents}
        return History.from_dependencies(cps, self.log.history().messages)

    def check_applied(self, result: c.Result, line: dict[str, int]) -> None:
        assert isinstance(result, c.RestoreResult), result
        assert {s.agent_id: s.checkpoint_index for s in result.steps} == line
        orders = {o.agent_id: o.checkpoint_index for o in self.m.state.orders("g") if o.kind is OrderKind.ROLL_BACK}
        assert orders == line
        for agent in self.agents:
            assert all(cp.index <= line[agent] for cp in self.m.state.checkpoints("g", agent)), agent


@SETTINGS
@given(st.integers(2, 4), MODES, EVENTS, st.data())
def test_a_restore_containing_checkpoints_goes_to_the_newest_consistent_cut_containing_them(
        n: int, mode: Mode, events: list, data: st.DataObject) -> None:
    run = Run(n, mode)
    run.play(events, "m")
    history = run.existing()
    candidates = sorted((a, i) for a, cps in history.checkpoints.items() for i in cps if i)
    if not candidates:
        return
    picked = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=n, unique_by=lambda p: p[0]))
    fixed = dict(picked)
    command = c.RestoreGroup("g", containing=tuple(SavedCheckpoint(a, i) for a, i in picked))
    expected = bf.maximum(bf.containing(history, fixed))
    event("no line" if expected is None else "restored")
    if expected is None:
        failure = run.m.fail(command, c.Code.FAILED_PRECONDITION)  # fail() checks the digest is unchanged
        assert failure.reason_code == "NO_RESTORE_LINE", failure
        return
    run.check_applied(run.m.run(command), expected)


@SETTINGS
@given(st.integers(2, 4), MODES, EVENTS, EVENTS)
def test_a_restore_to_a_savepoint_goes_back_to_exactly_it(n: int, mode: Mode, before: list, after: list) -> None:
    run = Run(n, mode)
    run.play(before, "m")
    expected = bf.recovery_line(run.log.history(), set(run.agents))
    if not any(expected.values()):
        return  # nothing consistent to save yet (the savepoint tests cover the refusal)
    run.m.ok(c.CreateSavepoint("g", "s"))
    run.play(after, "n")
    result = run.m.run(c.RestoreGroup("g", "s"))
    run.check_applied(result, expected)
    assert bf.consistent(run.log.history(), expected)
