"""Group restores in the pure state machine: a restore is one recovery (orders, fences,
generations, deleted checkpoints and dependency records), its dry run is the same plan
without writes, refusals change nothing, a retry is applied once, and a restore and a
failure recovery end in one consistent outcome in either order."""
from __future__ import annotations

import dataclasses

import pytest

from coordinator import wire
from coordinator.core import commands as c
from coordinator.core import restore
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.history import Dependency
from coordinator.core.model import (
    RECENT_EPOCHS, AgentState, CheckpointKind, EpochState, GroupSpec, GroupState, Mode, OrderKind, SavedCheckpoint,
)
from coordinator.storage.state import KvState
from tests.core.test_state_machine import Machine
from tests.replication.test_applier import Replica, raft_entry

TOKEN = c.Token(1, 0)


@pytest.fixture
def m() -> Machine:
    return Machine()


def _message(m: Machine, sender: str, send_interval: int, receiver: str, receive_interval: int, mid: str) -> None:
    m.ok(c.ReportDependencies("g", receiver, TOKEN, (Dependency(sender, send_interval, receiver, receive_interval,
                                                                mid, 1),)))


def _saved_then_moved_on(m: Machine) -> None:
    """a and b at checkpoint 2 when savepoint s is taken; then each checkpoints to 4 and
    they exchange messages after the savepoint (a→b in a's interval 3, b→a in b's 4)."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)))
    for agent in ("a", "b"):
        m.register("g", agent)
        m.commit("g", agent, 1)
    _message(m, "a", 2, "b", 2, "before")
    for agent in ("a", "b"):
        m.commit("g", agent, 2)
    m.ok(c.CreateSavepoint("g", "s"))
    _message(m, "a", 3, "b", 3, "after-1")
    for agent in ("a", "b"):
        m.commit("g", agent, 3)
    _message(m, "b", 4, "a", 4, "after-2")
    for agent in ("a", "b"):
        m.commit("g", agent, 4)


def _rollbacks(m: Machine) -> dict[str, tuple[int, int]]:
    """Per agent, its pending rollback order's (checkpoint, generation)."""
    return {o.agent_id: (o.checkpoint_index, o.generation) for o in m.state.orders("g")
            if o.kind is OrderKind.ROLL_BACK}


def test_a_restore_to_a_savepoint_is_one_recovery_of_every_member(m: Machine) -> None:
    _saved_then_moved_on(m)
    before = {a: m.state.agent("g", a) for a in ("a", "b")}
    result = m.ok(c.RestoreGroup("g", "s"))
    assert isinstance(result, c.RestoreResult) and result.recovery_id == 1
    assert result.steps == (
        c.RestoreStep("a", 2, 3, (3, 4), sends_undone=1, receives_undone=1),
        c.RestoreStep("b", 2, 3, (3, 4), sends_undone=1, receives_undone=1))
    group = m.state.group("g")
    assert group.state is GroupState.RECOVERING and group.recovery_id == 1
    assert _rollbacks(m) == {a: (2, before[a].generation + 1) for a in ("a", "b")}
    for agent in ("a", "b"):
        after = m.state.agent("g", agent)
        assert after.state is AgentState.ALIVE and after.last_checkpoint_index == 2 and after.rollback_order
        assert after.fences[-1].index == 2 and after.fences[-1].generation == after.generation
        assert [cp.index for cp in m.state.checkpoints("g", agent)] == [1, 2]
    assert [d.message_id for d in m.state.dependencies("g")] == ["before"]
    # Until it obeys, an agent's writes are refused; once every order is acknowledged the group runs.
    assert m.commit("g", "a", 3).reason_code is ReasonCode.ORDER_PENDING
    for order in m.state.orders("g"):
        m.ok(c.AckOrder("g", order.agent_id, TOKEN, order.order_id))
    assert m.state.group("g").state is GroupState.RUNNING
    assert not isinstance(m.commit("g", "a", 3), c.Failure)
    assert c.decode_result(bytes(c.encode_result(result))) == result  # as the dedupe table keeps it


def test_a_dry_run_shows_the_steps_the_restore_then_takes_and_writes_nothing(m: Machine) -> None:
    _saved_then_moved_on(m)
    digest = m.store.digest()
    planned = restore.plan(m.state, m.state.group("g"), "s", ())
    assert m.store.digest() == digest
    assert m.ok(c.RestoreGroup("g", "s")).steps == planned.steps


def test_a_restore_containing_checkpoints_takes_the_newest_line_with_them(m: Machine) -> None:
    _saved_then_moved_on(m)
    # a's 3 holds its send of interval 3 that b's 4 received, and not the receive of b's send of
    # interval 4: b keeps its newest checkpoint.
    result = m.ok(c.RestoreGroup("g", containing=(SavedCheckpoint("a", 3),)))
    assert {s.agent_id: s.checkpoint_index for s in result.steps} == {"a": 3, "b": 4}


def test_refusals_name_their_reason_and_change_nothing(m: Machine) -> None:
    _saved_then_moved_on(m)
    m.ok(c.CreateSavepoint("g", "later"))  # at a 4, b 4: a restore to s would delete what it holds
    cases = [
        (c.RestoreGroup("g", "nope"), ReasonCode.SAVEPOINT_NOT_FOUND, "savepoint"),
        (c.RestoreGroup("zz", "s"), ReasonCode.GROUP_NOT_FOUND, None),
        (c.RestoreGroup("g", "s"), ReasonCode.RESTORE_UNDOES_SAVEPOINT, "savepoint"),
        (c.RestoreGroup("g", containing=(SavedCheckpoint("x", 1),)), ReasonCode.AGENT_NOT_FOUND, "containing[0]"),
        (c.RestoreGroup("g", containing=(SavedCheckpoint("a", 9),)), ReasonCode.NO_RESTORE_LINE, "containing[0]"),
        # b's 4 holds the receive of a send a made in interval 3, after its 2: no line has both.
        (c.RestoreGroup("g", containing=(SavedCheckpoint("a", 2), SavedCheckpoint("b", 4))),
         ReasonCode.NO_RESTORE_LINE, "containing"),
        (c.RestoreGroup("g"), ReasonCode.INVALID_FIELD, "savepoint"),
        (c.RestoreGroup("g", "s", (SavedCheckpoint("a", 1),)), ReasonCode.INVALID_FIELD, "savepoint"),
        (c.RestoreGroup("g", containing=(SavedCheckpoint("a", 0),)), ReasonCode.INVALID_FIELD, "containing[0].index"),
        (c.RestoreGroup("g", containing=(SavedCheckpoint("a", 1), SavedCheckpoint("a", 2))), ReasonCode.INVALID_FIELD,
         "containing[1].agent_id"),
    ]
    for command, reason, field in cases:
        failure = m.fail(command, reason.code, field)  # fail() checks the state digest is unchanged
        assert failure.reason_code is reason, (command, failure)
    m.ok(c.DeleteSavepoint("g", "later"))
    assert isinstance(m.ok(c.RestoreGroup("g", "s")), c.RestoreResult)


def test_a_coordinated_group_goes_back_to_the_savepoints_epoch(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)))
    for agent in ("a", "b"):
        m.register("g", agent)

    def epoch(number: int) -> None:
        m.ok(c.StartEpoch("g"))
        for agent in ("a", "b"):
            m.commit("g", agent, number, epoch=number, kind=CheckpointKind.COORDINATED)

    epoch(1)
    m.ok(c.CreateSavepoint("g", "s"))
    epoch(2)
    m.ok(c.StartEpoch("g"))  # epoch 3 is open when the restore comes
    result = m.ok(c.RestoreGroup("g", "s"))
    assert result.epoch == 1 and {s.agent_id: s.checkpoint_index for s in result.steps} == {"a": 1, "b": 1}
    group = m.state.group("g")
    assert group.stable_epoch == 1 and group.current_epoch == 3
    assert [(e.epoch, e.state) for e in m.state.epochs("g")] == [
        (1, EpochState.STABLE), (2, EpochState.ABORTED), (3, EpochState.ABORTED)]
    # The same line named by one of its checkpoints, and refused across epochs.
    for order in m.state.orders("g"):
        m.ok(c.AckOrder("g", order.agent_id, c.Token(1, 3), order.order_id))
    assert m.ok(c.CreateSavepoint("g", "again")).savepoint.epoch == 1
    assert m.ok(c.RestoreGroup("g", containing=(SavedCheckpoint("b", 1),))).epoch == 1


def test_a_restore_during_a_recovery_supersedes_it_and_a_failure_after_a_restore_stays_below_it(m: Machine) -> None:
    _saved_then_moved_on(m)
    # A failure first (a's recovery: a back to 4, b kept), then the restore: every order is the restore's.
    m.ok(c.DeclareAgentFailed("g", "a", 1))
    assert set(_rollbacks(m)) == {"a"}
    m.ok(c.RestoreGroup("g", "s"))
    assert {a: i for a, (i, _) in _rollbacks(m).items()} == {"a": 2, "b": 2}
    assert m.state.agent("g", "a").state is AgentState.FAILED  # it registers again and resumes from 2
    assert m.ok(c.Register("g", "a")).resume_from.index == 2

    other = Machine()
    _saved_then_moved_on(other)
    # The restore first, then a failure of b before anyone acknowledged: still at the restore line.
    other.ok(c.RestoreGroup("g", "s"))
    other.ok(c.DeclareAgentFailed("g", "b", 1))
    assert {a: i for a, (i, _) in _rollbacks(other).items()} == {"a": 2, "b": 2}


def test_a_retried_restore_is_applied_once() -> None:
    replica = Replica()
    at = 1000.0
    setup = Machine()
    _saved_then_moved_on(setup)  # the same commands, replayed through the applier with its dedupe table
    commands = [c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)), c.Register("g", "a"),
                c.Register("g", "b")]
    for i, command in enumerate(commands):
        replica.apply(raft_entry(at, wire.entry_to_pb(c.Entry(f"setup-{i}", at, command))))
    for agent in ("a", "b"):
        for index in (1, 2):
            replica.apply(raft_entry(at, wire.entry_to_pb(c.Entry(f"{agent}{index}", at, c.CommitCheckpoint(
                c.Token(1, 0, ""), setup.state.checkpoint("g", agent, index))))))
    replica.apply(raft_entry(at, wire.entry_to_pb(c.Entry("sp", at, c.CreateSavepoint("g", "s")))))
    restore_entry = wire.entry_to_pb(c.Entry("restore-1", at, c.RestoreGroup("g", "s"), issued_at=at))
    first = replica.apply(raft_entry(at, restore_entry))
    assert isinstance(first, c.RestoreResult) and first.recovery_id == 1, first
    again = replica.apply(raft_entry(at + 1, restore_entry))
    assert again == first
    state = KvState(replica.records)
    assert state.group("g").recovery_id == 1
    assert sorted(o.order_id for o in state.orders("g")) == sorted(a.rollback_order for a in state.agents("g"))
    assert {a.agent_id: a.generation for a in state.agents("g")} == {"a": 2, "b": 2}  # bumped once, not twice


def test_garbage_collection_keeps_the_rollback_floor_at_a_savepoint(m: Machine) -> None:
    """An agent forgets what it logged to re-deliver below its rollback floor; a restore to
    the savepoint re-delivers what was received after it, so the floor stays there."""
    _saved_then_moved_on(m)
    m.ok(c.GarbageCollect("g"))
    assert {a: m.state.agent("g", a).rollback_floor for a in ("a", "b")} == {"a": 2, "b": 2}
    m.ok(c.DeleteSavepoint("g", "s"))
    m.ok(c.GarbageCollect("g"))
    assert {a: m.state.agent("g", a).rollback_floor for a in ("a", "b")} == {"a": 4, "b": 4}


def test_a_line_below_an_agents_rollback_floor_is_refused(m: Machine) -> None:
    """A floor set by a collection that did not yet stop at savepoints (an older node):
    the agent may have dropped what a restore to the savepoint would re-deliver."""
    _saved_then_moved_on(m)
    state = m.state
    state.put_agent(dataclasses.replace(state.agent("g", "a"), rollback_floor=3))
    m.store.commit(state.encoded_writes(), m.index)
    failure = m.fail(c.RestoreGroup("g", "s"), Code.FAILED_PRECONDITION, "savepoint")
    assert failure.reason_code is ReasonCode.NO_RESTORE_LINE and "below checkpoint 3" in failure.reason, failure


def test_a_coordinated_epoch_whose_members_are_forgotten_is_refused(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, retention=20)))
    for agent in ("a", "b"):
        m.register("g", agent)
    for epoch in range(1, RECENT_EPOCHS + 3):
        m.ok(c.StartEpoch("g"))
        for agent in ("a", "b"):
            m.commit("g", agent, epoch, epoch=epoch, kind=CheckpointKind.COORDINATED)
    m.ok(c.GarbageCollect("g"))  # retention keeps the checkpoints of epoch 1, not its record
    assert m.state.epoch("g", 1) is None and m.state.checkpoint("g", "a", 1) is not None
    failure = m.fail(c.RestoreGroup("g", containing=(SavedCheckpoint("a", 1),)), Code.FAILED_PRECONDITION,
                     "containing")
    assert failure.reason_code is ReasonCode.NO_RESTORE_LINE and "members are unknown" in failure.reason, failure
    assert m.ok(c.RestoreGroup("g", containing=(SavedCheckpoint("a", 5),))).epoch == 5


def test_a_savepoint_of_an_agents_initial_state_keeps_its_floor_at_zero(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)))
    for agent in ("a", "b"):
        m.register("g", agent)
    m.commit("g", "a", 1)
    assert {s.agent_id: s.index for s in m.ok(c.CreateSavepoint("g", "s")).savepoint.checkpoints} == {"a": 1, "b": 0}
    for index in (1, 2):
        m.commit("g", "b", index)
    m.ok(c.GarbageCollect("g"))
    assert m.state.agent("g", "b").rollback_floor == 0
    assert {s.agent_id: s.checkpoint_index for s in m.ok(c.RestoreGroup("g", "s")).steps} == {"a": 1, "b": 0}
