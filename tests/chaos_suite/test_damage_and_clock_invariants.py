"""The bit-rot and clock-jump scenarios' own invariants, on hand-made histories."""
from __future__ import annotations

from chaos.history import FAIL, NEMESIS, Op
from chaos.invariants import clocks, damage
from chaos.invariants.facts import Facts
from tests.chaos_suite.script import Script


def nemesis(f: str, value: dict, at: float) -> Op:
    return Op(0, at, NEMESIS, "info", f, value, None, None)


def with_nemesis(script: Script, *ops: Op) -> list[Op]:
    return sorted([*script.ops(), *ops], key=lambda op: op.time)


def flipped(what: str, at: float) -> Op:
    return nemesis(damage.BIT_ROT_DONE, {"node": 1, "file": what, "flipped": {"offsets": [9]}}, at)


def outcome(what: str, at: float) -> Op:
    return nemesis(damage.BIT_ROT_OUTCOME, {"node": 1, "outcome": what}, at)


def test_a_damaged_store_may_be_refused_or_run_but_never_crash_the_node() -> None:
    fine = [flipped("store", 1), outcome(damage.REFUSED, 2), flipped("store", 3), outcome(damage.RUNNING, 4)]
    result = damage.check(Facts(fine))
    assert result.ok and result.counts == {"damaged": 2, "refused": 1, "running": 1}
    result = damage.check(Facts([*fine, flipped("store", 5), outcome("exited with -7", 6)]))
    assert not result.ok and "exited with -7" in result.examples[0]["why"]


def test_a_damaged_journal_or_snapshot_must_be_refused() -> None:
    for what in ("journal", "snapshot"):
        assert damage.check(Facts([flipped(what, 1), outcome(damage.REFUSED, 2)])).ok
        result = damage.check(Facts([flipped(what, 1), outcome(damage.RUNNING, 2)]))
        assert not result.ok and f"running on a damaged {what}" in result.examples[0]["why"]


def test_a_write_refused_for_time_is_a_violation_and_other_refusals_are_not() -> None:
    s = Script()
    s.create_group("g")
    s.call("commit", {"group": "g", "agent": "a"}, start=1.0, end=1.1, outcome=FAIL,
           error="FAILED_PRECONDITION: token.incarnation: stale incarnation")
    step = nemesis("clock-step", {"node": 0, "seconds": 3600.0}, 1.5)
    result = clocks.check(Facts(with_nemesis(s, step)))
    assert result.ok and result.counts == {"refused_for_time": 0, "clock_steps": 1}
    s.call("commit", {"group": "g", "agent": "a"}, start=2.0, end=2.1, outcome=FAIL,
           error="FAILED_PRECONDITION: issued_at: request too old to deduplicate: issued 3600.001s before ...")
    s.call("commit", {"group": "g", "agent": "a"}, start=3.0, end=3.1, outcome=FAIL,
           error="INVALID_ARGUMENT: raftpoint-issued-at: more than 600s ahead of the coordinator's clock; ...")
    result = clocks.check(Facts(with_nemesis(s, step)))
    assert not result.ok and result.violations == 2
