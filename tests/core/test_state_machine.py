"""The pure state machine, driven through KvState over the in-memory store."""
from __future__ import annotations

import itertools

import pytest

from coordinator.core import commands as c
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.history import Dependency
from coordinator.core.model import (
    AgentState, Checkpoint, CheckpointKind, EpochState, GroupSpec, GroupState, Mode, OrderKind,
)
from coordinator.core.state_machine import apply
from coordinator.core.validation import MAX_CHECKPOINT_INDEX, MAX_INDEX_STEP
from coordinator.storage import open_store
from coordinator.storage.state import KvState

SHA = "ab" * 32


class Machine:
    """Applies commands the way the replication layer does: writes only on success."""

    def __init__(self) -> None:
        self.store = open_store("memory", None)
        self.index = 0
        self.ids = itertools.count(1)

    def run(self, command: c.Command, now: float = 100.0) -> c.Result:
        self.index += 1
        state = KvState(self.store)
        result = apply(state, c.Entry(f"r{next(self.ids)}", now, command))
        self.store.commit({} if isinstance(result, c.Failure) else state.encoded_writes(), self.index)
        return result

    def ok(self, command: c.Command, now: float = 100.0) -> c.Result:
        result = self.run(command, now)
        assert not isinstance(result, c.Failure), result
        return result

    def fail(self, command: c.Command, code: Code, field: str | None = None) -> c.Failure:
        before = self.store.digest()
        result = self.run(command)
        assert isinstance(result, c.Failure), result
        assert result.code is code, result
        if field is not None:
            assert result.field == field, result
        assert self.store.digest() == before, "a rejected command changed the state"
        return result

    @property
    def state(self) -> KvState:
        return KvState(self.store)

    def with_group(self, spec: GroupSpec, *agents: str) -> "Machine":
        """The group created and `agents` registered in it: where many tests start."""
        self.ok(c.CreateGroup(spec))
        for agent in agents:
            self.register(spec.name, agent)
        return self

    def register(self, group: str, agent: str) -> int:
        return self.ok(c.Register(group, agent)).agent.incarnation

    def commit(self, group: str, agent: str, index: int, *, inc: int = 1, epoch: int = 0,
               kind: CheckpointKind = CheckpointKind.BASIC) -> c.Result:
        cp = Checkpoint(group, agent, index, epoch, kind, f"file:///blobs/{agent}/{index}", SHA, 100)
        return self.run(c.CommitCheckpoint(c.Token(inc, epoch), cp))


@pytest.fixture
def m() -> Machine:
    return Machine()


def test_create_group_is_idempotent_and_validated(m: Machine) -> None:
    spec = GroupSpec("g", Mode.CIC_BCS)
    assert m.ok(c.CreateGroup(spec)).group.spec == spec
    assert m.ok(c.CreateGroup(spec)).group.spec == spec
    m.fail(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)), Code.ALREADY_EXISTS, "spec.group")
    m.fail(c.CreateGroup(GroupSpec("bad name")), Code.INVALID_ARGUMENT, "spec.group")
    m.fail(c.CreateGroup(GroupSpec("h", lease_ttl_s=float("nan"))), Code.INVALID_ARGUMENT, "spec.lease_ttl_s")


def test_checkpoints_need_a_current_incarnation_and_rising_index(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    assert m.register("g", "a") == 1
    first = m.commit("g", "a", 1)
    assert first.checkpoint.stable and first.checkpoint.incarnation == 1
    assert m.commit("g", "a", 1) == first  # identical retry is answered, not duplicated
    m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 1, 0, CheckpointKind.BASIC, "file:///other", SHA, 1)),
           Code.ALREADY_EXISTS, "checkpoint.index")
    m.fail(c.CommitCheckpoint(c.Token(7, 0), Checkpoint("g", "a", 2, 0, CheckpointKind.BASIC, "file:///x", SHA, 1)),
           Code.FAILED_PRECONDITION, "token.incarnation")
    m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 2, 0, CheckpointKind.BASIC, "file:///x", "xyz", 1)),
           Code.INVALID_ARGUMENT, "checkpoint.sha256")
    m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 3, 0, CheckpointKind.COORDINATED, "file:///x", SHA, 1)),
           Code.INVALID_ARGUMENT, "checkpoint.kind")
    m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "zz", 2, 0, CheckpointKind.BASIC, "file:///x", SHA, 1)),
           Code.NOT_FOUND)
    assert not isinstance(m.commit("g", "a", 5), c.Failure)  # indexes may jump (BCS forced checkpoints)
    m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 4, 0, CheckpointKind.BASIC, "file:///x", SHA, 1)),
           Code.FAILED_PRECONDITION, "checkpoint.index")


def test_coordinated_epoch_becomes_stable_when_all_members_commit(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)))
    for agent in ("a", "b"):
        m.register("g", agent)
    m.fail(c.StartEpoch("nope"), Code.NOT_FOUND)
    epoch = m.ok(c.StartEpoch("g")).epoch
    assert epoch.epoch == 1 and epoch.members == ("a", "b")
    assert {(o.agent_id, o.kind, o.epoch) for o in m.state.orders("g")} == {
        ("a", OrderKind.CHECKPOINT_NOW, 1), ("b", OrderKind.CHECKPOINT_NOW, 1)}
    m.fail(c.StartEpoch("g"), Code.FAILED_PRECONDITION)  # one open epoch at a time
    m.fail(c.CommitCheckpoint(c.Token(1, 2), Checkpoint("g", "a", 1, 2, CheckpointKind.COORDINATED, "file:///x", SHA, 1)),
           Code.FAILED_PRECONDITION, "token.epoch")
    assert m.commit("g", "a", 1, epoch=1, kind=CheckpointKind.COORDINATED).stable_epoch == 0
    assert not m.state.checkpoint("g", "a", 1).stable
    assert m.commit("g", "b", 1, epoch=1, kind=CheckpointKind.COORDINATED).stable_epoch == 1
    assert m.state.epoch("g", 1).state is EpochState.STABLE
    assert all(m.state.checkpoint("g", a, 1).stable for a in ("a", "b"))
    assert m.state.orders("g") == []


def test_aborted_epoch_keeps_previous_stable_line(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)))
    m.register("g", "a")
    m.register("g", "b")
    m.ok(c.StartEpoch("g"))
    m.commit("g", "a", 1, epoch=1, kind=CheckpointKind.COORDINATED)
    assert m.ok(c.AbortEpoch("g", 1, "deadline")).epoch.state is EpochState.ABORTED
    assert m.state.group("g").stable_epoch == 0
    stale = m.commit("g", "b", 1, epoch=1, kind=CheckpointKind.COORDINATED)
    assert isinstance(stale, c.Failure) and stale.field == "checkpoint.epoch"
    assert m.ok(c.StartEpoch("g")).epoch.epoch == 2


def _cic_group_with_message(m: Machine) -> None:
    """a checkpoints (1), sends m1 in interval 2; b receives it in interval 1 and checkpoints (1)."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.register("g", "b")
    m.commit("g", "a", 1)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 1, "m1"),)))
    m.commit("g", "b", 1)


def test_failure_rolls_back_dependents_and_acks_resume(m: Machine) -> None:
    _cic_group_with_message(m)
    recovery = m.ok(c.DeclareAgentFailed("g", "a", 1))
    # a restarts from checkpoint 1, which does not contain the send of m1; b's
    # checkpoint 1 contains its receive, so b must go back to its initial state.
    assert {(t.agent_id, t.checkpoint_index) for t in recovery.targets} == {("a", 1), ("b", 0)}
    assert m.state.group("g").state is GroupState.RECOVERING
    assert m.state.checkpoint("g", "b", 1) is None
    assert m.state.dependencies("g") == []
    assert m.state.agent("g", "a").state is AgentState.FAILED
    orders = {o.agent_id: o for o in m.state.orders("g")}
    assert orders["b"].kind is OrderKind.ROLL_BACK and orders["b"].checkpoint_index == 0
    # b may not write until it obeys; the failed agent re-registers and resumes from its target.
    m.fail(c.ReportDependencies("g", "b", c.Token(1, 0), ()), Code.FAILED_PRECONDITION, "agent_id")
    again = m.ok(c.Register("g", "a"))
    assert again.agent.incarnation == 2 and again.resume_from.index == 1
    m.fail(c.AckOrder("g", "a", c.Token(1, 0), orders["a"].order_id), Code.FAILED_PRECONDITION, "token.incarnation")
    assert m.ok(c.AckOrder("g", "a", c.Token(2, 0), orders["a"].order_id)).group_state is GroupState.RECOVERING
    assert m.ok(c.AckOrder("g", "b", c.Token(1, 0), orders["b"].order_id)).group_state is GroupState.RUNNING


def test_stale_failure_declaration_is_a_no_op(m: Machine) -> None:
    _cic_group_with_message(m)
    m.register("g", "a")  # restart before the lease expired: itself a failure of incarnation 1
    before = m.store.digest()
    assert m.ok(c.DeclareAgentFailed("g", "a", 1)).targets == ()
    assert m.store.digest() == before


def test_zombie_incarnation_is_fenced(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_HMNR)))
    m.register("g", "a")
    m.register("g", "a")
    m.fail(c.Deregister("g", "a", c.Token(1, 0)), Code.FAILED_PRECONDITION, "token.incarnation")
    # The restart was a failure of incarnation 1: the new one must restore and ack first.
    [order] = m.state.orders("g")
    assert (order.agent_id, order.kind, order.checkpoint_index) == ("a", OrderKind.ROLL_BACK, 0)
    m.fail(c.Deregister("g", "a", c.Token(2, 0)), Code.FAILED_PRECONDITION, "agent_id")
    m.ok(c.AckOrder("g", "a", c.Token(2, 0), order.order_id))
    m.ok(c.Deregister("g", "a", c.Token(2, 0)))
    assert m.state.group("g").members == ()


def test_dependency_reports_are_validated(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED)))
    m.register("g", "a")
    m.register("g", "b")
    m.fail(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 1, "x", 1, "m"),)),
           Code.INVALID_ARGUMENT, "records[0].receiver")
    m.fail(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 0, "b", 1, "m"),)),
           Code.INVALID_ARGUMENT, "records[0]")
    m.fail(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a b", 1, "b", 1, "m"),)),
           Code.INVALID_ARGUMENT, "records[0].sender")
    assert m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 1, "b", 1, "m"),))).accepted == 1


def test_a_dependency_on_a_sender_that_never_registered_is_refused(m: Machine) -> None:
    """An agent sends only once registered (its envelopes carry the generation Register
    gave it), and Register is applied before anything it sent can be reported: a record
    naming a sender the group never had describes no message, and would hold the
    receiver's recovery line to it. One that left stays known (its fences judge it)."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED)))
    m.register("g", "b")
    m.register("g", "left")
    m.ok(c.Deregister("g", "left", c.Token(1, 0)))
    refused = m.fail(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("left", 1, "b", 1, "m1"),
                                                                      Dependency("ghost", 1, "b", 1, "m2"))),
                     Code.NOT_FOUND, "records[1].sender")
    assert refused.reason_code is ReasonCode.AGENT_NOT_FOUND and "ghost" in refused.reason
    assert m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("left", 1, "b", 1, "m1"),))).accepted == 1


def test_a_checkpoint_index_may_not_jump_to_where_no_later_one_fits(m: Machine) -> None:
    """2^53 was accepted as a first index, and then the agent could never commit again
    (every higher index is out of bounds). A jump is bounded, so the top is out of reach."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    for index in (MAX_CHECKPOINT_INDEX, MAX_INDEX_STEP + 1):
        refused = m.fail(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", index, 0, CheckpointKind.BASIC,
                                                                         "file:///x", SHA, 1)),
                         Code.INVALID_ARGUMENT, "checkpoint.index")
        assert refused.reason_code is ReasonCode.INVALID_FIELD
    assert not isinstance(m.commit("g", "a", MAX_INDEX_STEP), c.Failure)  # a BCS jump of up to 2^32
    assert not isinstance(m.commit("g", "a", MAX_INDEX_STEP + 1), c.Failure)


def test_garbage_collect_keeps_recovery_line_and_retention(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS, retention=1)))
    m.register("g", "a")
    for i in range(1, 6):
        m.commit("g", "a", i)
    gc = m.ok(c.GarbageCollect("g"))
    remaining = [cp.index for cp in m.state.checkpoints("g", "a")]
    assert remaining == [4, 5]
    assert sorted(gc.deletable_blob_uris) == [f"file:///blobs/a/{i}" for i in (1, 2, 3)]
    assert gc.bytes == 300


def test_garbage_collect_against_one_blob_store_releases_only_its_checkpoints(m: Machine) -> None:
    """The other store's checkpoints stay recorded until a collection against that store."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)))
    for agent in ("a", "b"):
        m.register("g", agent)
        for i in range(1, 4):
            m.commit("g", agent, i)
    m.fail(c.GarbageCollect("g", "file:///blobs/a/\n"), Code.INVALID_ARGUMENT, "blob_store")
    assert m.ok(c.GarbageCollect("g", "file:///blobs/")).deletable_blob_uris == ()  # a store nested above
    assert m.ok(c.GarbageCollect("g", "file:///blobs/a/")).deletable_blob_uris == ("file:///blobs/a/1",
                                                                                    "file:///blobs/a/2")
    assert [cp.index for cp in m.state.checkpoints("g", "b")] == [1, 2, 3]
    assert m.ok(c.GarbageCollect("g", "file:///blobs/b/")).deletable_blob_uris == ("file:///blobs/b/1",
                                                                                    "file:///blobs/b/2")
    assert [cp.index for cp in m.state.checkpoints("g", "b")] == [3]


# ---- generations and rollback fences -----------------------------------------------

def _dep(sender: str, interval: int, receiver: str, receive: int, message_id: str, generation: int) -> Dependency:
    return Dependency(sender, interval, receiver, receive, message_id, send_generation=generation)


def test_generation_rises_with_each_registration_and_rollback(m: Machine) -> None:
    _cic_group_with_message(m)
    assert (m.state.agent("g", "a").generation, m.state.agent("g", "b").generation) == (1, 1)
    m.ok(c.DeclareAgentFailed("g", "a", 1))
    a, b = m.state.agent("g", "a"), m.state.agent("g", "b")
    assert (a.generation, b.generation) == (2, 2)
    assert [(f.generation, f.index) for f in a.fences] == [(2, 1)] and [(f.generation, f.index) for f in b.fences] == [(2, 0)]
    orders = {o.agent_id: o for o in m.state.orders("g")}
    # Every rollback order names its generation and carries the whole recovery line.
    assert (orders["a"].generation, orders["b"].generation) == (2, 2)
    assert {(f.agent_id, f.generation, f.index) for f in orders["b"].line} == {("a", 2, 1), ("b", 2, 0)}
    assert m.ok(c.Register("g", "a")).agent.generation == 3  # the new incarnation is a new generation too


def test_report_of_a_message_whose_send_was_undone_is_refused(m: Machine) -> None:
    _cic_group_with_message(m)
    m.register("g", "c")
    m.ok(c.DeclareAgentFailed("g", "a", 1))  # a rolls back to 1: its sends of generation 1 after interval 1 are undone
    before = m.store.digest()
    refused = m.fail(c.ReportDependencies("g", "c", c.Token(1, 0), (
        _dep("a", 1, "c", 1, "kept", 1), _dep("a", 2, "c", 1, "undone", 1))), Code.FAILED_PRECONDITION, "records[1]")
    assert "'undone'" in refused.reason and "orphan" in refused.reason and "checkpoint 1" in refused.reason
    assert m.store.digest() == before  # nothing of the refused report was stored, not even the valid record
    # The same interval in the sender's new generation is a new message, not an undone one.
    assert m.ok(c.ReportDependencies("g", "c", c.Token(1, 0), (
        _dep("a", 1, "c", 1, "kept", 1), _dep("a", 2, "c", 1, "again", 2)))).accepted == 2
    # A record without a generation (0) is judged as the oldest: refused past the fence.
    m.fail(c.ReportDependencies("g", "c", c.Token(1, 0), (_dep("a", 2, "c", 1, "legacy", 0),)),
           Code.FAILED_PRECONDITION, "records[0]")


def test_fences_of_successive_rollbacks_judge_each_generation(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.register("g", "r")
    for i in (1, 2, 3):
        m.commit("g", "a", i)
    m.ok(c.DeclareAgentFailed("g", "a", 1))  # a -> 3 at generation 2 (fence 2: after 3)
    order = next(o for o in m.state.orders("g") if o.agent_id == "a")
    assert m.ok(c.Register("g", "a")).agent.generation == 3
    m.ok(c.AckOrder("g", "a", c.Token(2, 0), order.order_id))
    m.commit("g", "a", 4, inc=2)
    m.ok(c.Register("g", "a"))  # a restart: a -> 4 at generation 4, then generation 5

    def accepted(generation: int, interval: int) -> bool:
        record = _dep("a", interval, "r", 1, f"m-{generation}-{interval}-{next(m.ids)}", generation)
        return not isinstance(m.run(c.ReportDependencies("g", "r", c.Token(1, 0), (record,))), c.Failure)

    assert not accepted(1, 4)  # generation 1, interval 4: undone by the first fence
    assert accepted(1, 3)
    assert not accepted(3, 5)  # generation 3 (the restart's life) after 4: undone by the second
    assert accepted(3, 4)
    assert accepted(5, 9)  # the current generation


def test_a_returning_agent_fences_off_what_it_sent_after_its_resume_point(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.register("g", "r")
    m.commit("g", "a", 1)
    m.ok(c.Deregister("g", "a", c.Token(1, 0)))
    again = m.ok(c.Register("g", "a"))
    assert again.resume_from.index == 1 and again.agent.generation == 2
    m.fail(c.ReportDependencies("g", "r", c.Token(1, 0), (_dep("a", 2, "r", 1, "after", 1),)),
           Code.FAILED_PRECONDITION, "records[0]")
    m.ok(c.ReportDependencies("g", "r", c.Token(1, 0), (_dep("a", 1, "r", 1, "before", 1),)))


def test_fence_pruning_keeps_the_decision() -> None:
    from coordinator.core import fences
    from coordinator.core.model import Fence

    kept = ()
    history = []
    for generation, index in enumerate([5, 3, 7, 7, 9, 2, 4], start=2):
        fence = Fence("a", generation, index)
        history.append(fence)
        kept = fences.add(kept, fence)
    assert [(f.generation, f.index) for f in kept] == [(7, 2), (8, 4)]
    for generation in range(1, 10):
        for interval in range(1, 12):
            exact = any(generation < f.generation and interval > f.index for f in history)
            assert (fences.undoing(kept, generation, interval) is not None) == exact, (generation, interval)


def test_fence_cap_merges_conservatively() -> None:
    from coordinator.core import fences
    from coordinator.core.model import Fence

    kept: tuple = ()
    history = [Fence("a", g, g * 2) for g in range(1, fences.MAX_FENCES + 20)]
    for fence in history:
        kept = fences.add(kept, fence)
    assert len(kept) == fences.MAX_FENCES
    for generation in range(0, len(history) + 2):
        for interval in range(0, 2 * len(history) + 2):
            exact = any(generation < f.generation and interval > f.index for f in history)
            judged = fences.undoing(kept, generation, interval) is not None
            assert judged or not exact, (generation, interval)  # never accepts an undone send
            if generation >= kept[0].generation or generation < history[0].generation:
                assert judged == exact, (generation, interval)  # exact outside the merged span


def test_a_message_reported_twice_counts_as_received_at_the_earliest(m: Machine) -> None:
    """A receiver that retries a delivery after a report with an unknown outcome may
    report the same message at two intervals; recovery must still work (a History
    refuses duplicate ids) and roll back at least as far as the truth requires."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED)))
    m.register("g", "a")
    m.register("g", "b")
    m.commit("g", "a", 1)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 1, "m1", 1),)))
    m.commit("g", "b", 1)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 2, "m1", 1),)))
    m.commit("g", "b", 2)
    targets = {t.agent_id: t.checkpoint_index for t in m.ok(c.DeclareAgentFailed("g", "a", 1)).targets}
    assert targets == {"a": 1, "b": 0}


def test_garbage_collection_raises_each_agents_rollback_floor(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS, retention=1)))
    m.register("g", "a")
    for i in range(1, 6):
        m.commit("g", "a", i)
    assert m.state.agent("g", "a").rollback_floor == 0
    m.ok(c.GarbageCollect("g"))
    assert m.state.agent("g", "a").rollback_floor == 4  # what GC kept: no line goes below it
    m.ok(c.GarbageCollect("g"))
    assert m.state.agent("g", "a").rollback_floor == 4


def test_dependency_reports_are_stored_per_report_and_read_back_once_each(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED)))
    for agent in ("a", "b", "x"):
        m.register("g", agent)
    report = (Dependency("a", 2, "b", 3, "m2"), Dependency("a", 1, "b", 1, "m1"), Dependency("x", 4, "b", 2, "m3"))
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), report))
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), report[1:]))  # overlaps: each message once
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 1, "b", 1, "m1"),
                                                         Dependency("a", 5, "b", 7, "m4"))))  # same first record
    m.ok(c.ReportDependencies("g", "a", c.Token(1, 0), (Dependency("b", 1, "a", 6, "m5"),)))
    assert m.state.dependencies("g") == [
        Dependency("b", 1, "a", 6, "m5"), Dependency("a", 1, "b", 1, "m1"), Dependency("x", 4, "b", 2, "m3"),
        Dependency("a", 2, "b", 3, "m2"), Dependency("a", 5, "b", 7, "m4")]
    # x fails with no checkpoint, so m3 was never sent; b goes back to its checkpoint 1,
    # so what it received later is undone too -- part of its first report stays.
    m.commit("g", "b", 1)
    recovery = m.ok(c.DeclareAgentFailed("g", "x", 1))
    assert {(t.agent_id, t.checkpoint_index) for t in recovery.targets} == {("x", 0), ("b", 1)}
    assert m.state.dependencies("g") == [Dependency("b", 1, "a", 6, "m5"), Dependency("a", 1, "b", 1, "m1")]
