"""The checker on hand-made histories: each invariant holding, and violated."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos import checker
from chaos.history import FAIL
from chaos.invariants import availability, convergence, durability, epochs, fencing, recovery_lines, retries
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from tests.chaos_suite.script import Script
from tests.oracle import brute_force as bf
from tests.oracle.strategies import histories


def group_with_agents(mode: str = "UNCOORDINATED", agents: tuple[str, ...] = ("a", "b")) -> Script:
    s = Script()
    s.create_group("g", mode)
    for i, agent in enumerate(agents):
        s.register("g", agent, 1, start=0.1 + i / 100)
    return s


# ---- 1. acknowledged checkpoints survive --------------------------------------------------
def test_every_acknowledged_checkpoint_listed_unchanged_holds() -> None:
    s = group_with_agents()
    for i in (1, 2, 3):
        s.commit("g", "a", i, start=i)
    s.commit("g", "a", 4, start=4, end=None)  # outcome unknown: allowed to be missing
    s.commit("g", "a", 5, start=5, outcome=FAIL, error="FAILED_PRECONDITION: stale")
    s.listed("g", [("a", 1), ("a", 2), ("a", 3)], at=10)
    result = durability.check(Facts(s.ops()))
    assert result.ok and result.counts["present"] == 3 and result.counts["acknowledged"] == 3


def test_a_lost_or_changed_checkpoint_is_a_violation() -> None:
    s = group_with_agents()
    for i in (1, 2, 3):
        s.commit("g", "a", i, start=i)
    s.listed("g", [("a", 1), ("a", 3)], at=10, changed=("a", 3))
    result = durability.check(Facts(s.ops()))
    assert not result.ok and (result.counts["missing"], result.counts["changed"]) == (1, 1)
    assert "checkpoint 2 was acknowledged and is gone" in result.examples[0]["why"]
    assert [op["f"] for op in result.examples[0]["ops"]] == ["commit", "commit", "list_checkpoints"]


def test_collection_and_rollback_excuse_a_missing_checkpoint_only_when_seen() -> None:
    s = group_with_agents()
    for i in (1, 2, 3, 4):
        s.commit("g", "a", i, start=i)
    s.gc("g", ["mem://g/a/1"], at=5)
    s.watch("g", "a", [(7, 2, 1)], at=6)  # recovery 1 rolled a back to 2
    s.listed("g", [("a", 2)], at=10)
    result = durability.check(Facts(s.ops()))
    assert result.ok and (result.counts["collected"], result.counts["rolled_back"]) == (1, 2)

    s = group_with_agents()
    s.watch("g", "a", [(7, 0, 1)], at=0.5)  # that recovery happened before checkpoint 1 was sent
    s.commit("g", "a", 1, start=1)
    s.listed("g", [], at=10)
    assert not durability.check(Facts(s.ops())).ok


def test_no_final_listing_is_a_violation() -> None:
    s = group_with_agents()
    s.commit("g", "a", 1, start=1)
    result = durability.check(Facts(s.ops()))
    assert not result.ok and "no final ListCheckpoints" in result.examples[0]["why"]
    s.call("list_checkpoints", {"group": "g"}, start=9, end=9.1, outcome=FAIL, error="NOT_FOUND: group 'g'")
    result = durability.check(Facts(s.ops()))  # the whole group is gone: everything in it was lost
    assert not result.ok and result.counts["missing"] == 1 and "checkpoint 1 was acknowledged and is gone" in \
        result.examples[0]["why"]


# ---- 2. one identity per stable epoch -------------------------------------------------------
def coordinated_epoch_one() -> Script:
    s = group_with_agents("COORDINATED")
    s.start_epoch("g", 1, ["a", "b"], start=1)
    s.commit("g", "a", 1, epoch=1, start=1.1)
    s.commit("g", "b", 1, epoch=1, start=1.2, stable_epoch=1)
    s.get_group("g", start=2, current=1, stable=1, agents={"a": 1, "b": 1},
                epochs=[Script.epoch(1, "EPOCH_STABLE", ["a", "b"], ["a", "b"])])
    return s


def test_a_stable_epoch_seen_the_same_everywhere_holds() -> None:
    result = epochs.check_identity(Facts(coordinated_epoch_one().ops()))
    assert result.ok and result.counts == {"epochs_seen": 1, "stable_epochs": 1, "acknowledged_epoch_checkpoints": 2}


def test_a_stable_epoch_with_two_committed_sets_is_a_violation() -> None:
    s = coordinated_epoch_one()
    s.get_group("g", start=3, current=1, stable=1, epochs=[Script.epoch(1, "EPOCH_STABLE", ["a", "b"], ["a"])])
    result = epochs.check_identity(Facts(s.ops()))
    assert [e["why"] for e in result.examples] == [
        "g epoch 1 is stable with committed ['a'] but members ['a', 'b']",
        "g epoch 1 is stable with committed ['a', 'b'] and with ['a']"]


def test_an_epoch_with_other_members_or_two_checkpoints_of_an_agent_is_a_violation() -> None:
    s = coordinated_epoch_one()
    s.get_group("g", start=3, current=1, stable=1,
                epochs=[Script.epoch(1, "EPOCH_STABLE", ["a", "b", "c"], ["a", "b", "c"])])
    assert not epochs.check_identity(Facts(s.ops())).ok
    s = coordinated_epoch_one()
    s.commit("g", "a", 2, epoch=1, start=1.5)
    result = epochs.check_identity(Facts(s.ops()))
    assert not result.ok and "has checkpoints [1, 2] acknowledged" in result.examples[0]["why"]


# ---- 3. epochs monotonic ---------------------------------------------------------------------
def test_epochs_never_go_back_in_real_time_order() -> None:
    s = group_with_agents("COORDINATED")
    s.get_group("g", start=1, current=1)
    s.get_group("g", start=2, end=2.1, current=2, stable=1)
    s.get_group("g", start=1.9, end=2.5, current=1)  # overlaps the read of 2: may see the older state
    assert epochs.check_monotonic(Facts(s.ops())).ok
    s.register("g", "c", 1, start=3, current=1, stable=1)  # starts after the read of 2 ended
    result = epochs.check_monotonic(Facts(s.ops()))
    assert not result.ok and "current_epoch went back from 2 to 1" in result.examples[0]["why"]
    s.get_group("g", start=4, current=2, stable=0)
    assert epochs.check_monotonic(Facts(s.ops())).violations == 2


# ---- 4. replicas agree -----------------------------------------------------------------------
def test_replicas_agree_on_every_sampled_index_and_converge() -> None:
    s = Script()
    s.sample("n1", 5, "d5", at=1)
    s.sample("n2", 5, "d5", at=1.1)
    s.sample("n3", 7, "d7", at=1.2)
    s.final({"n1": (9, "d9"), "n2": (9, "d9"), "n3": (9, "d9")}, at=5)
    result = convergence.check(Facts(s.ops()))
    assert result.ok and result.counts == {"samples": 3, "indexes_sampled": 2, "indexes_on_several_nodes": 1}


def test_two_digests_at_one_index_or_no_convergence_is_a_violation() -> None:
    s = Script()
    s.sample("n1", 5, "d5", at=1)
    s.sample("n2", 5, "other", at=1.1)
    s.final({"n1": (9, "d9"), "n2": (9, "d9")}, at=5)
    result = convergence.check(Facts(s.ops()))
    assert not result.ok and "index 5" in result.examples[0]["why"]
    s = Script()
    s.final({"n1": (9, "d9"), "n2": (8, "d8"), "n3": None}, at=5)
    assert "did not converge" in convergence.check(Facts(s.ops())).examples[0]["why"]
    assert not convergence.check(Facts(Script().ops())).ok  # no final sample at all


# ---- 5. recovery lines -----------------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_the_naive_algorithm_finds_the_maximum_consistent_cut(history, data) -> None:
    failed = set(data.draw(st.lists(st.sampled_from(sorted(history.checkpoints)), min_size=1, unique=True)))
    deps = [(m.sender, m.send_interval, m.receiver, m.receive_interval, m.message_id) for m in history.messages]
    assert recovery_lines.naive_recovery_line(history.checkpoints, deps, failed) == bf.recovery_line(history, failed)


def orphan_prone() -> Script:
    """a checkpoints 1; b receives a message a sent after it, then checkpoints 1: if a fails
    and rolls back to 1, b's checkpoint 1 holds an orphan receive and b must go to 0."""
    s = group_with_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "b", 1, start=1.1)
    s.deps("g", "b", [("a", 2, "b", 1, "m1")], start=1.2)
    return s


def test_issued_lines_equal_to_the_naive_line_hold() -> None:
    s = orphan_prone()
    s.what_if("g", ["a"], {"a": 1, "b": 0}, at=2)
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(1, 1, 1)], at=3.1)
    s.watch("g", "b", [(2, 0, 1)], at=3.2)
    s.get_group("g", start=3.5, recovery_id=1, state="RUNNING")
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok, result.examples
    assert (result.counts["recoveries_checked"], result.counts["what_ifs_checked"], result.counts["exact"]) == (1, 1, 2)


def test_a_line_keeping_an_orphan_or_rolling_back_too_far_is_a_violation() -> None:
    s = orphan_prone()
    s.what_if("g", ["a"], {"a": 1}, at=2)
    s.what_if("g", ["a"], {"a": 0, "b": 0}, at=2.1)
    result = recovery_lines.check(Facts(s.ops()))
    whys = [e["why"] for e in result.examples]
    assert any("b -> None, not far enough back" in w for w in whys)
    assert any("message m1" in w and "orphan" in w for w in whys)
    assert any("a -> 0, further back than needed" in w for w in whys)


def test_what_a_recovery_removed_no_longer_shapes_later_lines() -> None:
    s = orphan_prone()
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(1, 1, 1)], at=3.1)
    s.watch("g", "b", [(2, 0, 1)], at=3.2)  # b's checkpoint 1 and the receive of m1 are undone
    s.get_group("g", start=3.5, recovery_id=1, state="RUNNING")
    s.commit("g", "b", 2, start=4)
    s.what_if("g", ["a"], {"a": 1}, at=5)  # m1 is gone: b keeps its state
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok and result.counts["exact"] == 2, result.examples


def test_a_recovery_whose_orders_keep_an_orphan_is_a_violation() -> None:
    s = orphan_prone()
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(1, 1, 1)], at=3.1)
    s.watch("g", "b", [], at=3.2)
    s.get_group("g", start=3.5, recovery_id=1, state="RUNNING")
    result = recovery_lines.check(Facts(s.ops()))
    assert not result.ok and result.counts["recoveries_checked"] == 1
    assert "recovery 1" in result.examples[0]["why"]


def test_a_recovery_not_known_to_be_complete_is_not_checked() -> None:
    s = orphan_prone()
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(1, 1, 1)], at=3.1)  # no read shows the group running again: b's order may be unseen
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok and result.counts["recoveries_unchecked"] == 1


def test_an_unknown_outcome_widens_the_accepted_lines() -> None:
    s = group_with_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "b", 1, start=1.1)
    s.deps("g", "b", [("a", 2, "b", 1, "m1")], start=1.2, end=None)  # may or may not be stored
    s.what_if("g", ["a"], {"a": 1, "b": 0}, at=2)
    s.what_if("g", ["a"], {"a": 1}, at=2.1)
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok and result.counts["bounded"] == 2
    s.what_if("g", ["a"], {"a": 0}, at=2.2)  # still too far back
    assert not recovery_lines.check(Facts(s.ops())).ok


def test_a_what_if_may_count_agents_owing_an_acknowledgement_until_a_read_shows_the_group_running() -> None:
    """A recovery also rolls back the agents still owing the acknowledgement of an
    earlier rollback, and a what-if answers what that recovery would do."""
    s = group_with_agents(agents=("a", "b", "c"))
    for i, agent in enumerate(("a", "b", "c")):
        s.commit("g", agent, 1, start=1 + i / 10)
    s.deps("g", "b", [("a", 2, "b", 1, "m1")], start=1.5)
    s.register("g", "a", 2, start=3, recovery_id=1)
    s.watch("g", "a", [(1, 1, 1)], at=3.1)
    s.watch("g", "b", [(2, 0, 1)], at=3.2)
    s.what_if("g", ["c"], {"a": 1, "b": 0, "c": 1}, at=4)  # a and b may not have acknowledged yet
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok and result.counts["bounded"] == 1, result.examples
    s.get_group("g", start=5, recovery_id=1, state="RUNNING")
    s.what_if("g", ["c"], {"c": 1}, at=6)
    assert recovery_lines.check(Facts(s.ops())).ok
    s.what_if("g", ["c"], {"a": 1, "b": 0, "c": 1}, at=6.1)  # both have acknowledged by now
    whys = [e["why"] for e in recovery_lines.check(Facts(s.ops())).examples]
    assert any("what-if ['c']" in w and "a -> 1, further back than needed" in w for w in whys), whys


# ---- 6. retries apply once -------------------------------------------------------------------
def test_a_request_answered_the_same_every_time_holds() -> None:
    s = group_with_agents()
    rid = s.commit("g", "a", 1, start=1)
    s.commit("g", "a", 1, start=2, rid=rid)
    s.call("gc", {"group": "g"}, start=3, end=3.1, outcome=FAIL, error="RESOURCE_EXHAUSTED: full", rid="gc1")
    s.gc("g", [], at=4, rid="gc1")  # refused before proposing, then applied: not a second answer
    s.get_group("g", start=5, agents={"a": 1, "b": 1})
    result = retries.check(Facts(s.ops()))
    assert result.ok and result.counts["requests_sent_again"] == 2


def test_a_request_answered_differently_is_a_violation() -> None:
    s = group_with_agents()
    s.gc("g", ["mem://g/a/1"], at=3, rid="gc1")
    s.gc("g", [], at=4, rid="gc1")
    result = retries.check(Facts(s.ops()))
    assert not result.ok and "request gc1 (gc) was answered differently" in result.examples[0]["why"]


def test_a_checkpoint_stored_again_after_its_acknowledgement_is_a_violation() -> None:
    s = group_with_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "a", 2, start=2)
    s.listed("g", [("a", 1), ("a", 2)], at=5)
    assert retries.check(Facts(s.ops())).ok
    s.listed("g", [("a", 1), ("a", 2)], at=6, restamped=("a", 2))
    result = retries.check(Facts(s.ops()))
    assert not result.ok and "checkpoint 2 was stored again" in result.examples[0]["why"]


def test_an_incarnation_or_epoch_beyond_the_requests_is_a_violation() -> None:
    s = group_with_agents("COORDINATED")
    s.register("g", "a", 2, start=1, rid="again")
    s.call("register", {"group": "g", "agent": "a"}, start=1.5, end=1.6, outcome=FAIL,
           error="NOT_FOUND: group")  # refused: cannot have made an incarnation
    s.start_epoch("g", 1, ["a", "b"], start=2)
    s.get_group("g", start=5, current=2, agents={"a": 3, "b": 1})
    whys = [e["why"] for e in retries.check(Facts(s.ops())).examples]
    assert whys == ["g/a is at incarnation 3 after only 2 registration requests",
                    "g is at epoch 2 after only 1 StartEpoch requests"]
    s = group_with_agents()
    s.register("g", "a", 1, start=1)  # a second registration answered with the same incarnation
    assert "incarnation 1 was given to 2 registrations" in retries.check(Facts(s.ops())).examples[0]["why"]


# ---- 7. stale writes refused -----------------------------------------------------------------
def test_stale_writes_must_be_refused() -> None:
    s = group_with_agents()
    s.register("g", "a", 2, start=1, end=2)
    s.commit("g", "a", 1, incarnation=1, start=1.5, end=2.5)  # concurrent with the re-registration: may pass
    s.commit("g", "a", 2, incarnation=1, start=3, outcome=FAIL, error="FAILED_PRECONDITION: stale incarnation 1")
    result = fencing.check(Facts(s.ops()))
    assert result.ok and result.counts == {"agent_writes_acknowledged": 1, "stale_writes_refused": 1}
    s.deps("g", "a", [("b", 1, "a", 1, "z")], incarnation=1, start=4)
    result = fencing.check(Facts(s.ops()))
    assert not result.ok and "incarnation than 1 had already been registered" in result.examples[0]["why"]


def test_writes_for_a_closed_or_unstarted_epoch_must_be_refused() -> None:
    s = coordinated_epoch_one()
    s.commit("g", "a", 2, epoch=1, answered_epoch=2, start=3)  # epoch 1 was seen stable at 2
    s.commit("g", "b", 2, epoch=5, answered_epoch=1, start=4)  # only one StartEpoch was ever sent
    whys = [e["why"] for e in fencing.check(Facts(s.ops())).examples]
    assert len(whys) == 2 and "epoch 1 had already closed" in whys[0] and "epoch 5 cannot have started" in whys[1]


def test_a_refused_start_epoch_counts_as_starting_nothing() -> None:
    """A definite refusal means not applied: the dedupe table answers a client's re-send
    of a request id (within one call, after a lost answer) with its first answer. A
    StartEpoch applied and then refused on such a re-send (planted no-dedupe) leaves
    the commits for the epoch it started looking premature."""
    s = coordinated_epoch_one()
    s.call("start_epoch", {"group": "g"}, start=3, end=3.5, outcome=FAIL,
           error="FAILED_PRECONDITION: epoch 2 is still open")
    s.get_group("g", start=4, current=2, stable=1, agents={"a": 1, "b": 1})
    rid = s.commit("g", "a", 2, epoch=2, start=5)
    whys = [e["why"] for e in fencing.check(Facts(s.ops())).examples]
    assert whys == [f"g: commit {rid} was acknowledged although epoch 2 cannot have started (at most epoch 1 by then)"]


# ---- 8. serving after the faults heal ------------------------------------------------------------
def test_serving_soon_after_the_last_heal_holds_and_gaps_are_measured() -> None:
    s = group_with_agents()
    s.commit("g", "a", 1, start=1)
    s.fault("kill", at=2)
    s.commit("g", "a", 2, start=2.1, end=3.5)
    s.heal("kill", at=4)
    s.commit("g", "a", 3, start=4.1, end=4.3)
    result = availability.check(Facts(s.ops()), bound_s=1.0)
    assert result.ok
    assert abs(result.counts["longest_gap_s"] - 2.49) < 1e-6 and abs(result.counts["gap_after_kill_s"] - 2.49) < 1e-6
    assert abs(result.counts["serving_after_last_heal_s"] - 0.3) < 1e-6


def test_no_write_or_a_late_write_after_the_last_heal_is_a_violation() -> None:
    s = group_with_agents()
    s.fault("partition", at=2)
    s.heal("partition", at=4)
    assert "no write was acknowledged after the last heal" in \
        availability.check(Facts(s.ops())).examples[0]["why"]
    s.commit("g", "a", 1, start=4.1, end=20)
    assert "16.000s after the last heal" in availability.check(Facts(s.ops()), bound_s=10).examples[0]["why"]


# ---- the report -------------------------------------------------------------------------------
def test_the_report_has_every_invariant_and_extra_results_as_table_and_json() -> None:
    s = coordinated_epoch_one()
    s.listed("g", [("a", 1), ("b", 1)], at=5)
    s.final({"n1": (3, "d"), "n2": (3, "d")}, at=6)
    report = checker.check(s.ops())
    assert report.ok, report.table()
    assert len(report.results) == 15 and report.summary["operations"] == 8
    tokens = InvariantResult("tokens-conserved", True, {"recoveries": 0})
    tokens.violate("3 tokens missing after recovery 1")
    report = checker.check(s.ops(), extra=[tokens])
    assert not report.ok and report.failed() == ["tokens-conserved"]
    assert "tokens-conserved" in report.table() and "VIOLATED" in report.table()
    assert json.loads(report.to_json())["invariants"][-1]["examples"][0]["why"] == "3 tokens missing after recovery 1"
