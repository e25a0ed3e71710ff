"""The checker's GC and read invariants on hand-made histories: each weakness they
close is an edited history that must fail."""
from __future__ import annotations

from chaos import checker
from chaos.history import FAIL, INFO
from chaos.invariants import collection, durability, reads, recovery_lines
from chaos.invariants.facts import UNKNOWN_APPLY_GRACE_S, Facts
from tests.chaos_suite.script import Script


def two_agents(*, retention: int = 0) -> Script:
    s = Script()
    s.create_group("g", "UNCOORDINATED", retention=retention)
    s.register("g", "a", 1, start=0.1)
    s.register("g", "b", 1, start=0.2)
    return s


def a_committed(*indexes: int, retention: int = 0) -> Script:
    """Agent a's checkpoints, each acknowledged at the second its index names."""
    s = two_agents(retention=retention)
    for i in indexes:
        s.commit("g", "a", i, start=i)
    return s


def uri(agent: str, index: int) -> str:
    return f"mem://g/{agent}/{index}"


# ---- GC is checked, not trusted ----------------------------------------------------------
def test_gc_below_the_all_fail_line_holds() -> None:
    s = a_committed(1, 2, 3)
    s.gc("g", [uri("a", 1), uri("a", 2)], at=5)
    s.listed("g", [("a", 3)], at=10)
    result = collection.check(Facts(s.ops()))
    assert result.ok and result.counts["collected"] == 2


def test_gc_collecting_the_newest_usable_checkpoint_is_a_violation() -> None:
    s = a_committed(1, 2, 3)
    s.gc("g", [uri("a", 1), uri("a", 3)], at=5)
    s.listed("g", [("a", 2)], at=10)
    assert durability.check(Facts(s.ops())).ok  # the final listing alone is fooled: "collected"
    result = collection.check(Facts(s.ops()))
    assert not result.ok and result.counts["collected_needed"] == 1
    assert "collected checkpoint 3, at or above the watermark 3" in result.examples[0]["why"]


def test_gc_collecting_what_a_recovery_line_needs_because_of_a_dependency_is_a_violation() -> None:
    s = two_agents()
    for i in (1, 2):
        s.commit("g", "a", i, start=i)
        s.commit("g", "b", i, start=i + 0.5)
    s.deps("g", "b", [("a", 3, "b", 2, "m1")], start=3)  # b took in a message a's checkpoint 2 does not send
    s.gc("g", [uri("b", 1)], at=5)  # if everyone failed, b would restart from 1
    result = collection.check(Facts(s.ops()))
    assert not result.ok and "g/b: GC collected checkpoint 1" in result.examples[0]["why"]
    s = two_agents()
    for i in (1, 2):
        s.commit("g", "a", i, start=i)
        s.commit("g", "b", i, start=i + 0.5)
    s.gc("g", [uri("b", 1)], at=5)  # without the dependency, b's line is 2
    assert collection.check(Facts(s.ops())).ok


def test_retention_keeps_older_checkpoints_from_collection() -> None:
    s = a_committed(1, 2, 3, retention=1)
    s.gc("g", [uri("a", 1)], at=5)
    assert collection.check(Facts(s.ops())).ok
    s.gc("g", [uri("a", 2)], at=6)
    assert not collection.check(Facts(s.ops())).ok


def test_gc_collecting_a_blob_no_commit_wrote_is_a_violation() -> None:
    s = a_committed(1)
    s.gc("g", ["mem://g/a/7"], at=5)
    result = collection.check(Facts(s.ops()))
    assert not result.ok and "no commit wrote" in result.examples[0]["why"]


def test_an_unknown_gc_excuses_only_what_it_could_have_collected_in_its_time() -> None:
    s = a_committed(1, 2)
    s.call("gc", {"group": "g"}, start=3, end=3.01, outcome=INFO, error="DEADLINE_EXCEEDED: timed out")
    far = 3.01 + UNKNOWN_APPLY_GRACE_S + 5
    s.commit("g", "a", 3, start=far)
    s.commit("g", "a", 4, start=far + 1)
    s.listed("g", [("a", 2), ("a", 4)], at=far + 5)  # 1 may have gone with the GC; 3 came long after it
    result = durability.check(Facts(s.ops()))
    assert not result.ok and result.counts["possibly_collected"] == 1 and result.counts["missing"] == 1
    assert "checkpoint 3 was acknowledged and is gone" in result.examples[0]["why"]


# ---- reads are checked against acknowledged writes ----------------------------------------
def test_reads_that_show_every_acknowledged_write_hold() -> None:
    s = two_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "a", 2, start=4.995)  # still in flight when the read began: either answer is fine
    s.listed("g", [("a", 1)], at=5)
    s.get_group("g", start=6, agents={"a": 1, "b": 1})
    s.listed("g", [("a", 1), ("a", 2)], at=7)
    result = reads.check(Facts(s.ops()))
    assert result.ok and (result.counts["listings_checked"], result.counts["group_reads_checked"]) == (2, 1)


def test_a_read_missing_an_acknowledged_checkpoint_is_a_violation() -> None:
    s = two_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "a", 2, start=2)
    s.listed("g", [("a", 1)], at=5)  # a mid-run answer that dropped checkpoint 2
    s.listed("g", [("a", 1), ("a", 2)], at=9)
    assert durability.check(Facts(s.ops())).ok  # the final listing has it: only the read check sees the gap
    result = reads.check(Facts(s.ops()))
    assert not result.ok and result.counts["missing"] == 1
    assert "checkpoint 2 was acknowledged before a read that does not list it" in result.examples[0]["why"]


def test_a_read_excuses_what_a_gc_or_rollback_removed_before_it_was_answered() -> None:
    s = a_committed(1, 2, 3)
    s.gc("g", [uri("a", 1)], at=4)
    s.watch("g", "a", [(7, 2, 1)], at=4.5)  # recovery 1 rolled a back to 2
    s.listed("g", [("a", 2)], at=5)
    assert reads.check(Facts(s.ops())).ok


def test_a_read_listing_a_checkpoint_never_written_is_a_violation() -> None:
    s = two_agents()
    s.commit("g", "a", 1, start=1)
    s.listed("g", [("a", 1), ("b", 4)], at=5)
    s.commit("g", "b", 4, start=6)  # written only after the read was answered
    result = reads.check(Facts(s.ops()))
    assert not result.ok and result.counts["never_written"] == 1 and "no commit sent before it" in \
        result.examples[0]["why"]


def test_a_group_read_older_than_an_acknowledged_registration_is_a_violation() -> None:
    s = two_agents()
    s.register("g", "a", 2, start=1)
    s.get_group("g", start=2, agents={"a": 1, "b": 1})
    result = reads.check(Facts(s.ops()))
    assert not result.ok and result.counts["stale_agent"] == 1


# ---- the figures the report gives ---------------------------------------------------------
def test_the_summary_gives_the_orphan_refusal_rate() -> None:
    s = two_agents()
    s.deps("g", "b", [("a", 1, "b", 1, "m1")], start=1)
    s.deps("g", "b", [("a", 2, "b", 1, "m2")], start=2)
    s.call("report_deps", {"group": "g", "agent": "b", "incarnation": 1, "deps": [["a", 3, "b", 1, "m3"]]},
           start=3, end=3.01, outcome=FAIL, error="FAILED_PRECONDITION: orphan message 'm3': 'a' sent it ...")
    s.call("report_deps", {"group": "g", "agent": "b", "incarnation": 0, "deps": [["a", 3, "b", 1, "m4"]]},
           start=4, end=4.01, outcome=FAIL, error="FAILED_PRECONDITION: stale incarnation")
    summary = checker.check(s.ops()).summary
    assert (summary["dependency_reports"], summary["orphan_refusals"], summary["orphan_refusal_rate"]) == (3, 1, 0.333)


# ---- dependency records are checked by the lines that must honour them ----------------------
def test_a_what_if_naming_a_sender_failed_must_roll_back_its_receiver() -> None:
    """The workload's probe after an acknowledged report: a record acknowledged but not
    stored shows as a line that keeps its receiver."""
    s = two_agents()
    s.commit("g", "a", 1, start=1)
    s.commit("g", "b", 1, start=1.5)
    s.deps("g", "b", [("a", 2, "b", 1, "m1")], start=2)  # b took in, before its checkpoint 1, a's later send
    s.what_if("g", ["a"], {"a": 1, "b": 0}, at=3)
    result = recovery_lines.check(Facts(s.ops()))
    assert result.ok and result.counts["multi_agent"] == 1
    s.what_if("g", ["a"], {"a": 1}, at=4)
    result = recovery_lines.check(Facts(s.ops()))
    assert not result.ok and any("message m1" in e["why"] and "orphan" in e["why"] for e in result.examples)
