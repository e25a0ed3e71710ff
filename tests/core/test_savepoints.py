"""Savepoints in the pure state machine: what one holds in each mode, what garbage
collection keeps for it, and the refusals that leave the state alone."""
from __future__ import annotations

import io

import pytest

from coordinator.core import commands as c
from coordinator.core.authz import Grant, Role
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.history import EventLog
from coordinator.core.model import CheckpointKind, GroupSpec, Mode, SavedCheckpoint
from coordinator.core.state_machine import apply
from coordinator.storage import keys, open_store
from coordinator.storage.state import RESULT, KvState
from tests.core.test_state_machine import Machine
from tests.oracle import brute_force as bf

INDEPENDENT = (Mode.CIC_BCS, Mode.CIC_HMNR, Mode.CIC_FDAS, Mode.UNCOORDINATED)


@pytest.fixture
def m() -> Machine:
    return Machine()


def saved(result: c.Result) -> dict[str, int]:
    assert isinstance(result, c.SavepointResult), result
    return {s.agent_id: s.index for s in result.savepoint.checkpoints}


def _domino(m: Machine, mode: Mode) -> EventLog:
    """Three agents whose newest checkpoints are not consistent: b's checkpoint 2
    holds the receive of a message a sent after its checkpoint 2, so the maximum
    consistent cut takes b back to 1 (and c, which heard from b after 1, to 1).
    The same history is kept as an EventLog for the brute-force oracle."""
    log = EventLog(["a", "b", "c"])
    m.ok(c.CreateGroup(GroupSpec("g", mode, retention=0)))
    for agent in "abc":
        m.register("g", agent)

    def checkpoint(agent: str) -> None:
        index = log.checkpoint(agent)
        assert not isinstance(m.commit("g", agent, index), c.Failure)

    def message(sender: str, receiver: str, mid: str) -> None:
        log.send(sender, mid)
        log.receive(receiver, mid)
        dep = log.history().messages[-1]
        m.ok(c.ReportDependencies("g", receiver, c.Token(1, 0), (dep,)))

    for agent in "abc":
        checkpoint(agent)
    message("b", "c", "m1")
    checkpoint("a")
    checkpoint("c")
    message("a", "b", "m2")
    checkpoint("b")
    checkpoint("c")
    return log


@pytest.mark.parametrize("mode", INDEPENDENT, ids=lambda mode: mode.value)
def test_a_savepoint_of_an_independent_mode_is_the_maximum_consistent_cut(m: Machine, mode: Mode) -> None:
    log = _domino(m, mode)
    expected = bf.recovery_line(log.history(), {"a", "b", "c"})
    assert expected == {"a": 2, "b": 1, "c": 1}  # not simply the newest checkpoints
    result = m.ok(c.CreateSavepoint("g", "before-upgrade", {"by": "ops"}), now=123.0)
    assert saved(result) == expected
    assert result.savepoint.epoch == 0 and result.savepoint.labels == {"by": "ops"}
    assert result.savepoint.created_at == 123.0
    assert m.state.savepoints("g") == [result.savepoint]
    # As the dedupe table keeps it, for a retry's answer (bytes() drops the carried object).
    assert c.decode_result(bytes(c.encode_result(result))) == result


def test_a_savepoint_of_a_coordinated_group_is_its_last_stable_epoch(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)))
    for agent in ("a", "b"):
        m.register("g", agent)
    for epoch in (1, 2):
        m.ok(c.StartEpoch("g"))
        for agent in ("a", "b"):
            m.commit("g", agent, epoch, epoch=epoch, kind=CheckpointKind.COORDINATED)
    m.ok(c.StartEpoch("g"))
    m.commit("g", "a", 3, epoch=3, kind=CheckpointKind.COORDINATED)  # epoch 3 is open: not consistent yet
    result = m.ok(c.CreateSavepoint("g", "s"))
    assert saved(result) == {"a": 2, "b": 2} and result.savepoint.epoch == 2


def test_garbage_collection_keeps_what_a_savepoint_holds_and_collects_the_rest(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.UNCOORDINATED, retention=0)))
    for agent in ("a", "b"):
        m.register("g", agent)
        m.commit("g", agent, 1)
        m.commit("g", agent, 2)
    assert saved(m.ok(c.CreateSavepoint("g", "s"))) == {"a": 2, "b": 2}
    for agent in ("a", "b"):
        m.commit("g", agent, 3)
        m.commit("g", agent, 4)
    gc = m.ok(c.GarbageCollect("g"))
    # Without the savepoint 1, 2 and 3 of each go (the line is at 4); 2 stays for it.
    assert sorted(gc.deletable_blob_uris) == [f"file:///blobs/{a}/{i}" for a in ("a", "b") for i in (1, 3)]
    assert [cp.index for cp in m.state.checkpoints("g", "a")] == [2, 4]
    m.ok(c.DeleteSavepoint("g", "s"))
    assert m.ok(c.GarbageCollect("g")).deletable_blob_uris == ("file:///blobs/a/2", "file:///blobs/b/2")


def test_refusals_name_their_reason_and_change_nothing(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    refused = m.fail(c.CreateSavepoint("g", "s"), Code.FAILED_PRECONDITION)  # no stable checkpoint yet
    assert refused.reason_code is ReasonCode.NO_CONSISTENT_CUT
    m.commit("g", "a", 1)
    m.ok(c.CreateSavepoint("g", "s"))
    assert m.fail(c.CreateSavepoint("g", "s"), Code.ALREADY_EXISTS, "name").reason_code is ReasonCode.SAVEPOINT_EXISTS
    assert m.fail(c.DeleteSavepoint("g", "t"), Code.NOT_FOUND).reason_code is ReasonCode.SAVEPOINT_NOT_FOUND
    assert m.fail(c.CreateSavepoint("h", "s"), Code.NOT_FOUND).reason_code is ReasonCode.GROUP_NOT_FOUND
    m.fail(c.CreateSavepoint("g", "bad name"), Code.INVALID_ARGUMENT, "name")
    m.fail(c.CreateSavepoint("g", "t", {"k": "a\nb"}), Code.INVALID_ARGUMENT, "labels[k]")
    m.fail(c.CreateSavepoint("g", "t", {"bad key": "v"}), Code.INVALID_ARGUMENT, "labels")
    m.fail(c.CreateSavepoint("g", "t", {f"k{i}": "v" for i in range(33)}), Code.INVALID_ARGUMENT, "labels")

    m.ok(c.CreateGroup(GroupSpec("co", Mode.COORDINATED)))
    m.register("co", "a")
    m.ok(c.StartEpoch("co"))
    m.commit("co", "a", 1, epoch=1, kind=CheckpointKind.COORDINATED)
    m.ok(c.StartEpoch("co"))
    m.ok(c.AbortEpoch("co", 2, "deadline"))
    # Epoch 1 is stable: a savepoint of it is fine; a group with none is refused.
    assert saved(m.ok(c.CreateSavepoint("co", "s"))) == {"a": 1}
    m.ok(c.CreateGroup(GroupSpec("co2", Mode.COORDINATED)))
    m.register("co2", "a")
    m.ok(c.StartEpoch("co2"))
    assert m.fail(c.CreateSavepoint("co2", "s"), Code.FAILED_PRECONDITION).reason_code is ReasonCode.NO_CONSISTENT_CUT


def test_only_an_admin_principal_creates_or_deletes_one(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.commit("g", "a", 1)
    for principal in (Grant("watcher", Role.OBSERVER), Grant("worker", Role.AGENT, "g", "*")):
        for command in (c.CreateSavepoint("g", "s"), c.DeleteSavepoint("g", "s")):
            result = apply(KvState(m.store), c.Entry("r", 1.0, command, principal=principal))
            assert isinstance(result, c.Failure) and result.reason_code is ReasonCode.ROLE_FORBIDS, result
    admin = apply(KvState(m.store), c.Entry("r", 1.0, c.CreateSavepoint("g", "s"), principal=Grant("ops", Role.ADMIN)))
    assert isinstance(admin, c.SavepointResult)


def test_deleting_the_group_deletes_its_savepoints(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.commit("g", "a", 1)
    m.ok(c.CreateSavepoint("g", "s"))
    m.ok(c.Deregister("g", "a", c.Token(1, 0)))
    m.ok(c.DeleteGroup("g"))
    assert m.state.savepoints("g") == []
    assert m.store.scan(keys.prefix("s")) == []
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))  # the name is free again, savepoints included
    m.fail(c.DeleteSavepoint("g", "s"), Code.NOT_FOUND)


def test_the_state_digest_and_a_store_image_cover_savepoints(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.commit("g", "a", 1)
    before = m.store.digest(skip=keys.prefix(RESULT))
    created = m.ok(c.CreateSavepoint("g", "s", {"why": "release 2"})).savepoint
    assert m.store.digest(skip=keys.prefix(RESULT)) != before
    image = io.BytesIO()
    length = m.store.write_image(image)
    image.seek(0)
    copy = open_store("memory", None)
    copy.load_image(image, length)
    assert KvState(copy).savepoint("g", "s") == created
    assert created.checkpoints == (SavedCheckpoint("a", 1),)
