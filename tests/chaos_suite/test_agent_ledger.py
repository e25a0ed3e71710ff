"""The ground-truth ledger of token-passing runs, on hand-made histories: each judgement
fails on the fault it exists for and passes on the correct history next to it."""
from __future__ import annotations

from typing import Any

from chaos.tokens.ledger import DUPLICATES, LOST, ORPHANS, RESTORES, TOKENS, Journal, Ledger
from coordinator.core.model import Fence


def ledger() -> Ledger:
    """a and b hold 10 tokens each; a sent m1 (3 tokens) in generation 1, interval 2."""
    book = Ledger(["a", "b"], 10)
    book.sent(id="m1", sender="a", receiver="b", amount=3, interval=2, generation=1, envelope="")
    return book


def findings(book: Ledger, **kwargs: object) -> list[str]:
    return [f.invariant for f in book.verdict(**kwargs).findings]  # type: ignore[arg-type]


def test_a_delivery_whose_send_a_line_undid_is_an_orphan_unless_the_line_undid_it_too() -> None:
    book = ledger()
    book.accepted("m1", "b", interval=5, generation=1)
    book.line(1, [Fence("a", 2, 1)])  # a rolls back to checkpoint 1: its send in interval 2 is undone
    assert findings(book) == [ORPHANS]
    book.line(2, [Fence("b", 2, 4)])  # b rolls back only in a later recovery: still an orphan meanwhile
    assert findings(book) == [ORPHANS]

    consistent = ledger()
    consistent.accepted("m1", "b", interval=5, generation=1)
    consistent.line(1, [Fence("a", 2, 1), Fence("b", 2, 4)])
    assert findings(consistent) == []
    assert consistent.verdict().counts["sends_undone"] == 1


def test_a_message_accepted_after_its_send_was_undone_is_an_orphan() -> None:
    book = ledger()
    book.line(1, [Fence("a", 2, 1)])
    book.refused("m1", orphan=True, generation=1)
    assert findings(book) == []
    book.accepted("m1", "b", interval=5, generation=1)  # accepted anyway: nothing undoes this delivery
    assert findings(book) == [ORPHANS]


def test_a_lost_message_must_be_redelivered_exactly_once() -> None:
    book = ledger()
    book.accepted("m1", "b", interval=5, generation=1)
    book.line(1, [Fence("b", 2, 4)])  # b forgets the delivery, a keeps the send
    assert findings(book) == [LOST]
    book.accepted("m1", "b", interval=5, generation=2, redelivered=True)
    assert findings(book) == []
    assert book.verdict().counts["lost_by_rollbacks"] == 1
    assert [m.id for m, _ in book.lost_to(1)] == [d[0].id for d in book.redelivered_for(1)] == ["m1"]
    book.accepted("m1", "b", interval=5, generation=2, redelivered=True)
    assert findings(book) == [LOST]  # the same loss re-delivered twice


def test_a_redelivery_that_a_later_line_undoes_must_be_redelivered_again() -> None:
    book = ledger()
    book.accepted("m1", "b", interval=5, generation=1)
    book.line(1, [Fence("b", 2, 4)])
    book.accepted("m1", "b", interval=5, generation=2, redelivered=True)
    book.line(2, [Fence("b", 4, 4)])  # b crashed before checkpointing the re-delivery
    assert findings(book) == [LOST]
    book.accepted("m1", "b", interval=5, generation=5, redelivered=True)
    assert findings(book) == []


def test_a_duplicate_is_never_delivered_twice_while_the_first_delivery_stands() -> None:
    book = ledger()
    book.accepted("m1", "b", interval=5, generation=1)
    book.refused("m1", orphan=False, generation=1)
    assert findings(book) == []
    book.accepted("m1", "b", interval=6, generation=1)
    assert findings(book) == [DUPLICATES]


def test_a_refusal_must_be_justified_by_the_record() -> None:
    book = ledger()
    book.refused("m1", orphan=True, generation=1)  # no line undid the send: the message is lost
    assert findings(book) == [LOST]
    dup = ledger()
    dup.refused("m1", orphan=False, generation=1)  # nothing delivered it: lost too
    assert findings(dup) == [LOST]
    gone = ledger()
    gone.accepted("m1", "b", interval=5, generation=1)
    gone.line(1, [Fence("b", 2, 4), Fence("a", 2, 1)])
    gone.refused("m1", orphan=False, generation=2)  # the delivery b held was undone before this attempt
    assert findings(gone) == [LOST]


def test_at_the_end_a_standing_message_is_delivered_or_still_in_the_network() -> None:
    book = ledger()
    assert findings(book, final=True, network=["m1"]) == []
    assert findings(book) == []
    assert findings(book, final=True) == [LOST]


def test_tokens_in_transit_count_as_far_as_the_agents_had_got_at_the_audit() -> None:
    book = ledger()
    # a started with 10 and sent 3 in m1: 7 in a, 3 in transit, 10 in b
    assert book.audit("in flight", {"a": 7, "b": 10}, {"a": 1, "b": 1}, ["m1"]).conserved
    book.line(1, [Fence("a", 2, 1)])  # the send is undone once a rolls back (generation 2)
    assert book.audit("a not rolled back yet", {"a": 7, "b": 10}, {"a": 1, "b": 1}, ["m1"]).conserved
    assert book.audit("a rolled back", {"a": 10, "b": 10}, {"a": 2, "b": 1}, ["m1"]).conserved
    counted_twice = book.audit("the undone send counted again", {"a": 10, "b": 10}, {"a": 1, "b": 1}, ["m1"])
    assert not counted_twice.conserved and counted_twice.in_agents + counted_twice.in_transit == 23
    assert findings(book, network=["m1"]) == [TOKENS]


def test_recovery_lines_must_agree_and_checkpoints_stand_unless_rolled_back_or_collected() -> None:
    book = ledger()
    assert book.line(1, [Fence("a", 2, 1)]) and not book.line(1, [Fence("a", 2, 1)])
    book.line(1, [Fence("a", 2, 0)])
    assert findings(book, network=["m1"]) == [ORPHANS]  # one recovery, two different lines
    book.committed("a", 1, "u1", "s1", generation=1)
    book.committed("a", 2, "u2", "s2", generation=1)  # rolled below by recovery 1
    book.committed("b", 1, "u3", "s3", generation=1)
    standing, counts = book.standing({"u3"})
    assert [c.uri for c in standing] == ["u1"]
    assert counts == {"acknowledged": 3, "rolled_back": 1, "collected": 1}


def test_a_message_from_a_replaced_incarnation_is_never_delivered() -> None:
    book = ledger()
    book.sent(id="z1", sender="a", receiver="b", amount=4, interval=2, generation=3, envelope="", zombie=True)
    book.refused("z1", orphan=True, generation=1)
    assert findings(book, final=True, network=["m1"]) == []
    # z1 carries no tokens: the replaced incarnation's state counts nowhere
    assert book.audit("zombie in flight", {"a": 7, "b": 10}, {"a": 1, "b": 1}, ["m1", "z1"]).conserved
    book.accepted("z1", "b", interval=5, generation=1)
    assert findings(book, network=["m1"]) == [ORPHANS]


def restored(cut: dict[str, int], line: list[Fence], tokens: dict[str, int], journal: Journal | None = None) -> Ledger:
    """m1 (a -> b, 3 tokens) crosses the savepoint {a: 2, b: 4}: sent in a's interval 2,
    received in b's interval 5; m2 (b -> a, 2 tokens) is sent and received after it. The
    group is restored to `cut` with `line`, and its agents report holding `tokens`."""
    book = Ledger(["a", "b"], 10, journal)
    book.sent(id="m1", sender="a", receiver="b", amount=3, interval=2, generation=1, envelope="")
    book.accepted("m1", "b", interval=5, generation=1)
    book.sent(id="m2", sender="b", receiver="a", amount=2, interval=6, generation=1, envelope="")
    book.accepted("m2", "a", interval=3, generation=1)
    book.restore(1, "sp", cut)
    book.line(1, line)
    for f in line:
        book.rolled_back(f.agent_id, 1, f.index, tokens[f.agent_id])
    b = next(f for f in line if f.agent_id == "b")
    if b.index < 5:  # the line took m1 from b and kept its send: b re-delivers it
        book.accepted("m1", "b", interval=b.index + 1, generation=b.generation, redelivered=True)
    return book


def test_a_restore_goes_back_to_the_savepoint_a_consistent_cut_holding_every_token() -> None:
    savepoint = {"a": 2, "b": 4}
    book = restored(savepoint, [Fence("a", 2, 2), Fence("b", 2, 4)], {"a": 7, "b": 10})
    assert findings(book) == []
    counts = book.verdict().counts
    assert (counts["restores"], counts["restored_agents"]) == (1, 2)
    tally, orphaned = book.cut({"a": Fence("a", 2, 2), "b": Fence("b", 2, 4)})
    assert (tally.in_agents, tally.in_transit, tally.conserved, orphaned) == (17, 3, True, [])


def test_a_restore_elsewhere_than_the_savepoint_or_to_other_tokens_is_caught() -> None:
    savepoint = {"a": 2, "b": 4}
    # The coordinator ordered another line (consistent, so no other judgement notices).
    assert findings(restored(savepoint, [Fence("a", 2, 3), Fence("b", 2, 6)], {"a": 9, "b": 11})) == [RESTORES]
    # An agent kept what it received after the savepoint.
    assert findings(restored(savepoint, [Fence("a", 2, 2), Fence("b", 2, 4)], {"a": 7, "b": 13})) == [RESTORES]
    # A savepoint that is not a consistent cut: b received m1 in it, a sent m1 after it.
    inconsistent = restored({"a": 1, "b": 5}, [Fence("a", 2, 1), Fence("b", 2, 5)], {"a": 10, "b": 13})
    assert RESTORES in findings(inconsistent)
    assert "orphan" in next(f.why for f in inconsistent.verdict().findings if f.invariant == RESTORES)


def test_a_restore_superseded_before_any_agent_obeyed_it_has_nothing_to_judge() -> None:
    book = ledger()
    book.restore(1, "sp", {"a": 0, "b": 0})
    assert findings(book) == []
    assert book.verdict().counts["restores_superseded"] == 1


def test_a_restore_is_judged_again_from_its_journal() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    book = restored({"a": 2, "b": 4}, [Fence("a", 2, 2), Fence("b", 2, 4)], {"a": 7, "b": 13},
                    lambda event, args: events.append((event, args)))
    assert findings(Ledger.replay(["a", "b"], 10, events)) == findings(book) == [RESTORES]
