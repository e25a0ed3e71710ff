"""The membership rules and the Raft events, without a cluster."""
from __future__ import annotations

import pytest

from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.membership import RaftView, check_addition, check_removal, quorum, raft_events

A, B, C, D, E = (f"10.0.0.{i}:7000" for i in range(1, 6))


def refusal(voters: set[str], live: set[str], node: str, force: bool = False) -> ReasonCode | None:
    try:
        check_removal(frozenset(voters), frozenset(live), node, force=force)
    except Rejection as r:
        return r.reason_code
    return None


def test_quorum() -> None:
    assert [quorum(n) for n in range(1, 7)] == [1, 2, 2, 3, 3, 4]


@pytest.mark.parametrize("voters, live, node, expected", [
    ({A, B, C, D}, {A, B, C, D}, D, None),  # 4 -> 3, all live
    ({A, B, C}, {A, B, C}, C, ReasonCode.TOO_FEW_VOTERS),  # 3 -> 2
    ({A, B}, {A, B}, B, ReasonCode.TOO_FEW_VOTERS),  # 2 -> 1
    ({A, B, C, D, E}, {A, B, C}, C, ReasonCode.TOO_FEW_LIVE_VOTERS),  # 4 left, 2 live < 3
    ({A, B, C, D, E}, {A, B, C}, E, None),  # removing a dead one: 4 left, 3 live
    ({A, B, C, D}, {A, B}, D, None),  # 3 left, 2 live = quorum
    ({A, B, C, D}, {A}, D, ReasonCode.TOO_FEW_LIVE_VOTERS),
    ({A, B, C}, {A, B, C}, D, ReasonCode.MEMBERSHIP_CHANGE_REFUSED),  # not a member
])
def test_removal_rules(voters: set[str], live: set[str], node: str, expected: ReasonCode | None) -> None:
    assert refusal(voters, live, node) == expected


def test_force_skips_the_safety_checks_but_not_membership() -> None:
    assert refusal({A, B, C}, {A}, C, force=True) is None
    assert refusal({A, B, C}, {A}, D, force=True) is ReasonCode.MEMBERSHIP_CHANGE_REFUSED


def test_adding_a_voter_twice_is_refused() -> None:
    check_addition(frozenset({A, B}), C)
    with pytest.raises(Rejection) as r:
        check_addition(frozenset({A, B}), B)
    assert r.value.reason_code is ReasonCode.MEMBERSHIP_CHANGE_REFUSED


def view(role: str, term: int, leader: str = "", voters: frozenset[str] = frozenset({A, B, C})) -> RaftView:
    return RaftView(role, term, leader, voters)


@pytest.mark.parametrize("before, after, kinds", [
    (view("follower", 1, B), view("follower", 1, B), []),
    (view("follower", 1, B), view("candidate", 2), ["term_changed"]),
    (view("candidate", 2), view("leader", 2, A), ["election_won"]),
    (view("follower", 2), view("leader", 3, A), ["term_changed", "election_won"]),
    (view("candidate", 2), view("candidate", 3), ["term_changed", "election_lost"]),
    (view("candidate", 2), view("follower", 2, B), ["election_lost"]),
    (view("leader", 2, A), view("follower", 3, B), ["term_changed", "stepped_down"]),
    (view("leader", 2, A), view("leader", 2, A, frozenset({A, B, C, D})), ["member_added"]),
    (view("leader", 2, A), view("leader", 2, A, frozenset({A, B})), ["member_removed"]),
])
def test_raft_events(before: RaftView, after: RaftView, kinds: list[str]) -> None:
    assert [e.kind for e in raft_events(before, after)] == kinds
