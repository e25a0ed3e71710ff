"""Forks in the pure state machine: a new group holding a savepoint's cut, its agents
resuming from their copies when they register, the source untouched, refusals that
change nothing, a retry applied once, and each group's collection releasing only
its own manifests."""
from __future__ import annotations

import pytest

from coordinator import wire
from coordinator.core import commands as c
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.model import (AgentState, Checkpoint, CheckpointKind, EpochState, GroupSpec, Mode,
                                     RetentionPolicy)
from coordinator.storage.state import KvState
from tests.core.test_restore import _message, _saved_then_moved_on
from tests.core.test_state_machine import Machine
from tests.replication.test_applier import Replica, raft_entry

COPIES = (c.ForkedCheckpoint("a", 2, "file:///blobs/copy/a/2"), c.ForkedCheckpoint("b", 2, "file:///blobs/copy/b/2"))


@pytest.fixture
def m() -> Machine:
    machine = Machine()
    _saved_then_moved_on(machine)  # a and b at 2 in savepoint s, then both at 4
    return machine


def _commit_in_fork(m: Machine, agent: str, index: int) -> None:
    """A checkpoint of the fork (its blob named apart from the source's)."""
    m.ok(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("f", agent, index, 0, CheckpointKind.BASIC,
                                                      f"file:///blobs/f/{agent}/{index}", "0" * 64, 1)))


def _source_records(m: Machine) -> tuple[object, ...]:
    state = m.state
    return (state.group("g"), state.agents("g"), [state.checkpoints("g", a) for a in ("a", "b")],
            state.dependencies("g"), state.savepoints("g"))


def test_a_fork_holds_the_savepoints_cut_in_a_new_group_and_leaves_the_source_alone(m: Machine) -> None:
    m.ok(c.SetRetention("g", RetentionPolicy(keep_last=3)))
    source = _source_records(m)
    result = m.ok(c.ForkGroup("g", "s", "f", COPIES))
    assert isinstance(result, c.ForkResult)
    assert _source_records(m) == source
    group = m.state.group("f")
    assert group.spec == GroupSpec("f", Mode.UNCOORDINATED, retention=0)
    assert group.retention_policy == RetentionPolicy(keep_last=3) and group.members == ("a", "b")
    for agent_id in ("a", "b"):
        agent = m.state.agent("f", agent_id)
        assert (agent.state, agent.incarnation, agent.last_checkpoint_index) == (AgentState.FAILED, 0, 2)
        (forked,) = m.state.checkpoints("f", agent_id)
        original = m.state.checkpoint("g", agent_id, 2)
        assert (forked.index, forked.sha256, forked.size, forked.epoch) == (2, original.sha256, original.size, 0)
        assert forked.blob_uri == f"file:///blobs/copy/{agent_id}/2" != original.blob_uri
        assert forked.stable and forked.parent_index == 0 and forked.channel_state_uri == ""
    assert result.checkpoints == tuple(m.state.checkpoint("f", a, 2) for a in ("a", "b"))
    assert m.state.dependencies("f") == [] and m.state.savepoints("f") == []


def test_an_agent_registering_into_the_fork_resumes_from_its_copy_and_goes_on(m: Machine) -> None:
    m.ok(c.ForkGroup("g", "s", "f", COPIES))
    registered = m.ok(c.Register("f", "a"))
    assert registered.resume_from == m.state.checkpoint("f", "a", 2)
    assert (registered.agent.state, registered.agent.incarnation) == (AgentState.ALIVE, 1)
    assert m.commit("f", "a", 1).reason_code is ReasonCode.INDEX_NOT_ABOVE_LAST  # indexes go on from the copy
    _commit_in_fork(m, "a", 3)
    assert [cp.index for cp in m.state.checkpoints("f", "a")] == [2, 3]
    assert [cp.index for cp in m.state.checkpoints("g", "a")] == [1, 2, 3, 4]


def test_a_coordinated_fork_is_at_the_savepoints_stable_epoch_and_starts_the_next() -> None:
    m = Machine()
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, retention=0)))
    for agent in ("a", "b"):
        m.register("g", agent)
    for epoch in (1, 2):
        m.ok(c.StartEpoch("g"))
        for agent in ("a", "b"):
            assert isinstance(m.commit("g", agent, epoch, epoch=epoch, kind=CheckpointKind.COORDINATED),
                              c.CheckpointResult)
        if epoch == 1:
            m.ok(c.CreateSavepoint("g", "s"))
    copies = tuple(c.ForkedCheckpoint(a, 1, f"file:///copy/{a}") for a in ("a", "b"))
    m.ok(c.ForkGroup("g", "s", "f", copies))
    group = m.state.group("f")
    assert (group.current_epoch, group.stable_epoch) == (1, 1)
    epoch = m.state.epoch("f", 1)
    assert epoch.state is EpochState.STABLE and epoch.members == epoch.committed == ("a", "b")
    for agent in ("a", "b"):
        assert m.ok(c.Register("f", agent)).resume_from.epoch == 1
    assert m.ok(c.StartEpoch("f")).epoch.epoch == 2
    for agent in ("a", "b"):
        assert isinstance(m.commit("f", agent, 2, epoch=2, kind=CheckpointKind.COORDINATED), c.CheckpointResult)
    assert m.state.group("f").stable_epoch == 2
    assert m.ok(c.CreateSavepoint("f", "s2")).savepoint.epoch == 2


def test_a_fork_of_some_agents_of_the_savepoint_holds_only_them(m: Machine) -> None:
    m.ok(c.ForkGroup("g", "s", "f", COPIES[1:], agents=("b",)))
    assert m.state.group("f").members == ("b",) and [a.agent_id for a in m.state.agents("f")] == ["b"]
    assert m.state.checkpoints("f", "a") == [] and [cp.index for cp in m.state.checkpoints("f", "b")] == [2]


@pytest.mark.parametrize("command, code, reason, field", [
    (c.ForkGroup("g", "s", "g", COPIES), Code.ALREADY_EXISTS, ReasonCode.GROUP_EXISTS, "into"),
    (c.ForkGroup("g", "nope", "f", COPIES), Code.NOT_FOUND, ReasonCode.SAVEPOINT_NOT_FOUND, "savepoint"),
    (c.ForkGroup("nope", "s", "f", COPIES), Code.NOT_FOUND, ReasonCode.GROUP_NOT_FOUND, None),
    (c.ForkGroup("g", "s", "a b", COPIES), Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD, "into"),
    (c.ForkGroup("g", "s", "f", COPIES[:1]), Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD, "copies"),
    (c.ForkGroup("g", "s", "f", COPIES + (c.ForkedCheckpoint("c", 1, "file:///x"),)), Code.INVALID_ARGUMENT,
     ReasonCode.INVALID_FIELD, "copies[2]"),
    (c.ForkGroup("g", "s", "f", (COPIES[0], c.ForkedCheckpoint("b", 3, "file:///x"))), Code.INVALID_ARGUMENT,
     ReasonCode.INVALID_FIELD, "copies[1]"),
    (c.ForkGroup("g", "s", "f", (COPIES[0], c.ForkedCheckpoint("b", 2, "file:///blobs/b/2"))),
     Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD, "copies[1].blob_uri"),
    (c.ForkGroup("g", "s", "f", (COPIES[0], COPIES[0])), Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD,
     "copies[1].agent_id"),
    (c.ForkGroup("g", "s", "f", (COPIES[0], c.ForkedCheckpoint("b", 2, ""))), Code.INVALID_ARGUMENT,
     ReasonCode.INVALID_FIELD, "copies[1].blob_uri"),
    (c.ForkGroup("g", "s", "f", COPIES, agents=("a", "zz")), Code.NOT_FOUND, ReasonCode.AGENT_NOT_FOUND,
     "agents[1]"),
    (c.ForkGroup("g", "s", "f", COPIES, agents=("a", "a")), Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD,
     "agents[1]"),
    (c.ForkGroup("g", "s", "f", COPIES, agents=("a",)), Code.INVALID_ARGUMENT, ReasonCode.INVALID_FIELD, "copies[1]"),
])
def test_a_refused_fork_changes_nothing(m: Machine, command: c.ForkGroup, code: Code, reason: ReasonCode,
                                        field: str | None) -> None:
    failure = m.fail(command, code, field)
    assert failure.reason_code is reason, failure


def test_a_retried_fork_is_applied_once() -> None:
    replica = Replica()
    at = 1000.0
    setup = Machine()
    _saved_then_moved_on(setup)
    commands: list[c.Command] = [c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)),
                                 c.Register("g", "a"), c.Register("g", "b")]
    commands += [c.CommitCheckpoint(c.Token(1, 0, ""), setup.state.checkpoint("g", a, i)) for a in "ab" for i in (1, 2)]
    commands.append(c.CreateSavepoint("g", "s"))
    for i, command in enumerate(commands):
        replica.apply(raft_entry(at, wire.entry_to_pb(c.Entry(f"setup-{i}", at, command))))
    fork = wire.entry_to_pb(c.Entry("fork-1", at, c.ForkGroup("g", "s", "f", COPIES), issued_at=at))
    first = replica.apply(raft_entry(at, fork))
    assert isinstance(first, c.ForkResult) and first.group.spec.name == "f", first
    replica.apply(raft_entry(at, wire.entry_to_pb(c.Entry("reg", at, c.Register("f", "a")))))
    again = replica.apply(raft_entry(at + 1, fork))
    assert again == first  # the first answer, not GROUP_EXISTS
    assert KvState(replica.records).agent("f", "a").incarnation == 1  # and the fork was not written again


def test_each_groups_collection_releases_only_its_own_manifests(m: Machine) -> None:
    m.ok(c.ForkGroup("g", "s", "f", COPIES))
    for agent in ("a", "b"):
        m.register("f", agent)
    _message(m, "a", 3, "b", 5, "in-source")
    m.ok(c.DeleteSavepoint("g", "s"))
    released = m.ok(c.GarbageCollect("g")).deletable_blob_uris
    assert released and not set(released) & {cp.blob_uri for cp in COPIES}, released
    assert [cp.index for cp in m.state.checkpoints("f", "a")] == [2]
    for agent in ("a", "b"):
        for index in (3, 4):
            _commit_in_fork(m, agent, index)
    released = m.ok(c.GarbageCollect("f")).deletable_blob_uris
    assert set(released) == {cp.blob_uri for cp in COPIES} | {f"file:///blobs/f/{a}/3" for a in "ab"}, released
    assert [cp.index for cp in m.state.checkpoints("g", "a")] == [4]


def test_deleting_a_fork_whose_agents_never_registered_releases_its_copies(m: Machine) -> None:
    m.ok(c.ForkGroup("g", "s", "f", COPIES))
    assert set(m.ok(c.DeleteGroup("f")).deletable_blob_uris) == {cp.blob_uri for cp in COPIES}
