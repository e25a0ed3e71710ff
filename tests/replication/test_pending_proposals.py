"""Waiting proposals: settled once, given up when the lead is lost, decodings kept by entry bytes."""
from __future__ import annotations

import pytest

from coordinator.core.commands import Proposal
from coordinator.replication import pending_proposals
from coordinator.replication.pending_proposals import PendingProposals


def decoding(name: str) -> Proposal:
    """A distinct decoding per name (the tests compare identity, never contents)."""
    return Proposal(proposed_at=float(len(name)), dedupe_window_s=1.0, entries=())


def test_losing_the_lead_answers_every_waiting_proposal_once() -> None:
    pending = PendingProposals()
    answers: list[tuple[str, str]] = []
    pending.track_leadership(True)
    first = pending.add(b"a", decoding("a"), lambda reason: answers.append(("a", reason)))
    pending.add(b"b", None, lambda reason: answers.append(("b", reason)))
    assert pending.settle(first)  # applied before the lead was lost: not given up
    pending.track_leadership(True)
    assert answers == []
    pending.track_leadership(False)
    assert answers == [("b", "LEADER_CHANGED")]
    pending.track_leadership(False)
    assert answers == [("b", "LEADER_CHANGED")]


def test_a_given_up_proposal_cannot_be_settled_again() -> None:
    pending = PendingProposals()
    pending.track_leadership(True)
    number = pending.add(b"a", decoding("a"), lambda reason: None)
    pending.track_leadership(False)
    assert not pending.settle(number)
    assert pending.take_decoded(b"a") is None  # decodings of the old term are dropped with them


def test_a_node_that_never_led_gives_up_nothing() -> None:
    pending = PendingProposals()
    answers: list[str] = []
    pending.add(b"a", None, answers.append)
    pending.track_leadership(False)
    assert answers == []


def test_decodings_are_taken_once_and_forgotten_on_refusal() -> None:
    pending = PendingProposals()
    a, b = decoding("a"), decoding("b")
    pending.add(b"a", a, lambda reason: None)
    pending.add(b"b", b, lambda reason: None)
    assert pending.take_decoded(b"a") is a
    assert pending.take_decoded(b"a") is None
    pending.forget_decoded(b"b")
    assert pending.take_decoded(b"b") is None


def test_decodings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pending_proposals, "DECODED_LIMIT", 2)
    pending = PendingProposals()
    for name in ("a", "b", "c"):
        pending.add(name.encode(), decoding(name), lambda reason: None)
    assert [pending.take_decoded(n) is not None for n in (b"a", b"b", b"c")] == [False, False, True]
