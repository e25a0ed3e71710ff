"""The unauthorized-writes-refused invariant, on scripted histories."""
from __future__ import annotations

from chaos.history import FAIL, INFO
from chaos.invariants import authorization
from chaos.invariants.facts import Facts
from tests.chaos_suite.script import Script

ATTEMPT = {"as": "observer", "rpc": "CreateGroup", "target": "g"}


def test_refused_or_unanswered_intrusions_hold() -> None:
    s = Script()
    s.call("intrude", ATTEMPT, start=1, end=2, outcome=FAIL, error="PERMISSION_DENIED: REASON_ROLE_FORBIDS")
    s.call("intrude", {**ATTEMPT, "as": "agent", "rpc": "Register"}, start=3, end=4, outcome=FAIL,
           error="UNAUTHENTICATED: no credentials")
    s.call("intrude", ATTEMPT, start=5, end=6, outcome=INFO, error="UNAVAILABLE: no leader")
    result = authorization.check(Facts(s.ops()))
    assert result.ok and result.counts == {"attempts": 3, "refused": 2}


def test_an_intrusion_that_succeeds_is_a_violation() -> None:
    s = Script()
    s.call("intrude", ATTEMPT, start=1, end=2, outcome=FAIL, error="PERMISSION_DENIED: REASON_ROLE_FORBIDS")
    s.call("intrude", {**ATTEMPT, "as": "agent", "rpc": "Register"}, {"incarnation": 2}, start=3, end=4)
    result = authorization.check(Facts(s.ops()))
    assert not result.ok and "agent identity's Register on g succeeded" in result.examples[0]["why"]
