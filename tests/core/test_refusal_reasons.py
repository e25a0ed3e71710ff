"""Every refusal names its kind (ReasonCode), so clients decide on a code, never on text."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coordinator.core import commands as c
from coordinator.core import dedupe
from coordinator.core.dedupe import DedupeClock
from coordinator.core.errors import Code, ReasonCode, Rejection
from coordinator.core.history import Dependency
from coordinator.core.model import Checkpoint, CheckpointKind, GroupSpec, Mode
from tests.core.test_state_machine import SHA, Machine

ROOT = Path(__file__).resolve().parents[2]


def test_every_reason_belongs_to_one_status_and_unspecified_to_none() -> None:
    for reason in ReasonCode:
        if reason is ReasonCode.UNSPECIFIED:
            with pytest.raises(ValueError):
                _ = reason.code
        else:
            assert isinstance(reason.code, Code), reason


def test_because_derives_the_status_and_a_contradicting_status_is_refused() -> None:
    r = Rejection.because(ReasonCode.ORPHAN_MESSAGE, "undone", "records[0]")
    assert (r.code, r.reason_code, r.field) == (Code.FAILED_PRECONDITION, ReasonCode.ORPHAN_MESSAGE, "records[0]")
    assert Rejection.invalid("x", "bad").reason_code is ReasonCode.INVALID_FIELD
    with pytest.raises(ValueError, match="ORPHAN_MESSAGE"):
        Rejection(Code.NOT_FOUND, "undone", reason_code=ReasonCode.ORPHAN_MESSAGE)


def test_a_stored_failure_keeps_its_reason_and_an_old_one_reads_as_unspecified() -> None:
    failure = c.Failure.of(Rejection.because(ReasonCode.ORDER_PENDING, "rollback order 3 is pending", "agent_id"))
    stored = bytes(c.encode_result(failure))  # plain bytes, as read back from the store
    assert c.decode_result(stored) == failure
    old = stored.replace(b',"reason_code":"ORDER_PENDING"', b"")
    assert old != stored
    assert c.decode_result(old) == c.Failure(Code.FAILED_PRECONDITION, failure.reason, "agent_id",
                                             ReasonCode.UNSPECIFIED)


def _coordinated_with_open_epoch(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED)))
    m.register("g", "a")
    m.register("g", "b")
    m.ok(c.StartEpoch("g"))


def _cic_after_a_failed(m: Machine) -> None:
    """a sent m1 in interval 2 and failed: it rolls back to checkpoint 1, b owes a rollback."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    for agent in "abc":
        m.register("g", agent)
    m.commit("g", "a", 1)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 1, "m1"),)))
    m.ok(c.DeclareAgentFailed("g", "a", 1))


def _cic_with_checkpoint(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.commit("g", "a", 2)


def _checkpoint(index: int, kind: CheckpointKind = CheckpointKind.BASIC, *, uri: str = "file:///x",
                parent: int = 0, inc: int = 1) -> c.CommitCheckpoint:
    return c.CommitCheckpoint(c.Token(inc, 0), Checkpoint("g", "a", index, 0, kind, uri, SHA, 1, parent_index=parent))


def _left(m: Machine) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    m.register("g", "a")
    m.ok(c.Deregister("g", "a", c.Token(1, 0)))


CASES = {
    ReasonCode.INVALID_FIELD: (lambda m: None, c.CreateGroup(GroupSpec("bad name"))),
    ReasonCode.GROUP_NOT_FOUND: (lambda m: None, c.StartEpoch("nope")),
    ReasonCode.GROUP_SPEC_CONFLICT: (_cic_with_checkpoint, c.CreateGroup(GroupSpec("g", Mode.COORDINATED))),
    ReasonCode.AGENT_NOT_FOUND: (_cic_with_checkpoint, c.Deregister("g", "zz", c.Token(1, 0))),
    ReasonCode.WRONG_CHECKPOINT_KIND: (_cic_with_checkpoint, _checkpoint(3, CheckpointKind.COORDINATED)),
    ReasonCode.CHECKPOINT_CONFLICT: (_cic_with_checkpoint, _checkpoint(2, uri="file:///other")),
    ReasonCode.INDEX_NOT_ABOVE_LAST: (_cic_with_checkpoint, _checkpoint(1)),
    ReasonCode.PARENT_MISSING: (_cic_with_checkpoint, _checkpoint(4, parent=3)),
    ReasonCode.AGENT_NOT_ALIVE: (_left, c.Deregister("g", "a", c.Token(1, 0))),
    ReasonCode.NO_LIVE_MEMBERS: (lambda m: m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED))),
                                 c.StartEpoch("g")),
    # Order 1 is a rollback order for a or b.
    ReasonCode.ORDER_NOT_ADDRESSED: (_cic_after_a_failed, c.AckOrder("g", "c", c.Token(1, 0), 1)),
    ReasonCode.NOT_COORDINATED: (lambda m: m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS))), c.StartEpoch("g")),
    ReasonCode.EPOCH_STILL_OPEN: (_coordinated_with_open_epoch, c.StartEpoch("g")),
    ReasonCode.EPOCH_NOT_FOUND: (_coordinated_with_open_epoch, c.AbortEpoch("g", 9, "")),
    ReasonCode.STALE_INCARNATION: (_coordinated_with_open_epoch, c.Deregister("g", "a", c.Token(2, 1))),
    ReasonCode.EPOCH_NOT_STARTED: (_coordinated_with_open_epoch, c.Deregister("g", "a", c.Token(1, 2))),
    ReasonCode.ORDER_PENDING: (_cic_after_a_failed, c.ReportDependencies("g", "b", c.Token(1, 0), ())),
    ReasonCode.ORPHAN_MESSAGE: (_cic_after_a_failed, c.ReportDependencies("g", "c", c.Token(1, 0), (
        Dependency("a", 2, "c", 1, "undone", 1),))),
    ReasonCode.GROUP_RECOVERING: (_cic_after_a_failed, c.GarbageCollect("g")),
}


@pytest.mark.parametrize("reason", CASES, ids=str)
def test_the_state_machine_names_the_reason_of_its_refusal(reason: ReasonCode) -> None:
    m = Machine()
    setup, command = CASES[reason]
    setup(m)
    failure = m.fail(command, reason.code)
    assert failure.reason_code is reason, failure


def test_epoch_refusals_of_a_coordinated_checkpoint_are_told_apart() -> None:
    m = Machine()
    _coordinated_with_open_epoch(m)
    m.commit("g", "a", 1, epoch=1, kind=CheckpointKind.COORDINATED)
    again = m.commit("g", "a", 2, epoch=1, kind=CheckpointKind.COORDINATED)
    assert isinstance(again, c.Failure) and again.reason_code is ReasonCode.ALREADY_COMMITTED
    m.ok(c.AbortEpoch("g", 1, "deadline"))
    closed = m.commit("g", "b", 1, epoch=1, kind=CheckpointKind.COORDINATED)
    assert isinstance(closed, c.Failure) and closed.reason_code is ReasonCode.NOT_OPEN_EPOCH


def test_the_dedupe_window_names_its_two_refusals() -> None:
    clock = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.admit(clock, 1, 60.0).reason_code is ReasonCode.REQUEST_TOO_OLD
    assert dedupe.admit(clock, 2_000_000, 60.0).reason_code is ReasonCode.CLOCK_AHEAD


def _reasons_named(tree: ast.AST) -> set[str]:
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "ReasonCode"}


def test_every_reason_is_given_somewhere() -> None:
    """A reason no refusal uses is a promise to clients that nothing keeps. (errors.py
    counts only for what Rejection's own constructors give, not for the tables.)"""
    named: set[str] = set()
    for path in (ROOT / "coordinator").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        if path.name == "errors.py":
            tree = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Rejection")
        named |= _reasons_named(tree)
    assert {r.name for r in ReasonCode} - named == set()


def _direct_constructions(path: Path) -> list[str]:
    """Calls of Rejection(...) or Failure(...) themselves, which could leave the reason out."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in ("Rejection", "Failure"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_refusal_of_the_server_is_built_with_a_reason() -> None:
    """because()/invalid()/not_found() and Failure.of() always name a reason; building a
    Rejection or Failure directly (outside errors.py) is the one way to forget it."""
    sources = sorted((ROOT / "coordinator").rglob("*.py"))
    assert len(sources) > 20
    found = [hit for path in sources if "api" not in path.parts for hit in _direct_constructions(path)]
    assert found == []
