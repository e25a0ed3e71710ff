"""recovery-ends-after-every-ack on hand-made histories: a recovery seen over before its orders were acknowledged."""
from __future__ import annotations

from chaos import checker
from chaos.history import FAIL
from chaos.invariants import recovery_completion
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from tests.chaos_suite.script import Script


def recovery_of_two() -> Script:
    """Recovery 1 rolls back a (order 7) and b (order 8); each order is watched at once."""
    s = Script()
    s.create_group("g")
    s.register("g", "a", 1, start=0.1)
    s.register("g", "b", 1, start=0.2)
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(7, 2, 1)], at=3.05)
    s.watch("g", "b", [(8, 4, 1)], at=3.06)
    return s


def judged(s: Script) -> InvariantResult:
    return recovery_completion.check(Facts(s.ops()))


def test_running_after_the_last_acknowledgement_holds() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, start=3.1)
    s.ack("g", "b", 8, "RUNNING", start=3.2)
    s.get_group("g", start=3.5, recovery_id=1)
    result = judged(s)
    assert result.ok, result.examples
    # The last ack's own answer is the first to show it RUNNING: the read after it pins its counter.
    assert (result.counts["recoveries_judged"], result.counts["multi_order"], result.counts["orders_judged"],
            result.counts["by_ack"]) == (1, 1, 2, 1), result.counts


def test_an_acknowledgement_answered_running_while_another_order_was_unacknowledged_is_a_violation() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, "RUNNING", start=3.1)  # the group ran again on the first of two acknowledgements
    s.ack("g", "b", 8, "RUNNING", start=3.2)
    s.get_group("g", start=3.5, recovery_id=1)
    result = judged(s)
    assert not result.ok and result.counts["unacknowledged"] == 1, result.counts
    assert "recovery 1 seen RUNNING" in result.examples[0]["why"] and "order 8 to b" in result.examples[0]["why"]
    assert [op["f"] for op in result.examples[0]["ops"]] == ["watch_orders", "ack_order", "ack_order", "ack_order"]


def test_a_read_showing_running_between_the_acknowledgements_is_a_violation() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, start=3.1)
    s.get_group("g", start=3.15, recovery_id=1)
    s.ack("g", "b", 8, "RUNNING", start=3.2)
    result = judged(s)
    assert not result.ok and result.counts["by_read"] == 1, result.counts


def test_an_acknowledgement_in_flight_when_the_read_returned_may_have_been_applied_first() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, start=3.1)
    s.ack("g", "b", 8, start=3.2, end=None)  # no answer ever: it may have been applied at once
    s.get_group("g", start=3.15, end=3.25, recovery_id=1)
    assert judged(s).ok
    s = recovery_of_two()
    s.ack("g", "a", 7, start=3.1)
    s.ack("g", "b", 8, start=3.26, end=None)  # sent only after the read returned
    s.get_group("g", start=3.15, end=3.25, recovery_id=1)
    assert not judged(s).ok


def test_a_refused_acknowledgement_acknowledges_nothing() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, start=3.1)
    s.ack("g", "b", 8, start=3.2, outcome=FAIL, error="FAILED_PRECONDITION: stale incarnation")
    s.get_group("g", start=3.5, recovery_id=1)
    result = judged(s)
    assert not result.ok and "never acknowledged" in result.examples[0]["why"], result.examples


def test_an_acknowledgement_whose_counter_may_have_moved_on_is_not_taken_for_this_recovery() -> None:
    """Answered RUNNING, but the next answer shows recovery 2: the acknowledgement may
    have been applied after recovery 2 superseded order 8 and ended too."""
    s = recovery_of_two()
    s.ack("g", "a", 7, "RUNNING", start=3.1)
    s.register("g", "b", 2, start=3.5, recovery_id=2)
    s.get_group("g", start=3.6, recovery_id=2)
    result = judged(s)
    assert result.ok and result.counts["not_seen_running"] == 1, result.counts


def test_the_checker_reports_it() -> None:
    s = recovery_of_two()
    s.ack("g", "a", 7, "RUNNING", start=3.1)
    s.ack("g", "b", 8, "RUNNING", start=3.2)
    s.get_group("g", start=3.5, recovery_id=1)
    assert recovery_completion.NAME in checker.check(s.ops()).failed()
