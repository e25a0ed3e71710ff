"""A stalled node's election timer is held, but never against a leadership transfer."""
from __future__ import annotations

from types import SimpleNamespace

from coordinator.replication.pysyncobj_adapter import defer_election


def node(deadline: float, transfer: bool = False) -> SimpleNamespace:
    return SimpleNamespace(_SyncObj__raftElectionDeadline=deadline, _SyncObj__transferInProgress=transfer)


def test_the_timer_is_held_until_the_given_time_and_never_brought_forward() -> None:
    n = node(10.0)
    defer_election(n, 12.0)
    assert n._SyncObj__raftElectionDeadline == 12.0
    defer_election(n, 11.0)
    assert n._SyncObj__raftElectionDeadline == 12.0


def test_a_transfer_asked_for_an_election_now() -> None:
    for n in (node(0.0), node(10.0, transfer=True)):
        before = n._SyncObj__raftElectionDeadline
        defer_election(n, 99.0)
        assert n._SyncObj__raftElectionDeadline == before
