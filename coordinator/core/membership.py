"""Rules for Raft membership changes, and the Raft events worth a log line (pure).

A cluster that accepts every membership change can be broken by three calls: adding
nodes nobody runs grows the quorum past the live members (no leader, ever again,
even after a restart: the members are in the log), and removing members shrinks
the cluster to one node that acknowledges writes alone. The rules here are what a
change must satisfy before it is proposed; the effects (probing a new node,
proposing, logging) live in the transport and replication layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.errors import ReasonCode, Rejection, shown

# Fewer voters than this survive no failure at all (2 of 2 or 1 of 1 must be up).
MIN_VOTERS = 3


def quorum(voters: int) -> int:
    """How many voters a configuration of `voters` needs to elect and commit."""
    return voters // 2 + 1


def check_removal(voters: frozenset[str], live: frozenset[str], node: str, *, force: bool) -> None:
    """Raise unless removing `node` from `voters` leaves a configuration that still
    works: at least MIN_VOTERS voters, and at least a quorum of the new configuration
    live. `live`: the voters the leader hears from now (itself included). `force`
    skips both checks (the operator takes the risk, e.g. shrinking a test cluster)."""
    if node not in voters:
        raise Rejection.because(ReasonCode.MEMBERSHIP_CHANGE_REFUSED, f"{shown(node)} is not a voter of this cluster")
    if force:
        return
    remaining = voters - {node}
    if len(remaining) < MIN_VOTERS:
        raise Rejection.because(
            ReasonCode.TOO_FEW_VOTERS,
            f"removing {shown(node)} would leave {len(remaining)} voters, fewer than {MIN_VOTERS}: "
            "such a cluster survives no failure (use force to remove anyway)")
    live_after = len(remaining & live)
    if live_after < quorum(len(remaining)):
        raise Rejection.because(
            ReasonCode.TOO_FEW_LIVE_VOTERS,
            f"removing {shown(node)} would leave {live_after} live voters of {len(remaining)}, fewer than the "
            f"quorum of {quorum(len(remaining))}: the cluster could not commit (use force to remove anyway)")


def check_addition(voters: frozenset[str], node: str) -> None:
    """Raise if `node` is already a voter: adding it again would be refused by Raft
    after a round trip, and say nothing about why."""
    if node in voters:
        raise Rejection.because(ReasonCode.MEMBERSHIP_CHANGE_REFUSED, f"{shown(node)} is already a voter of this cluster")


# ---- events ------------------------------------------------------------------------
@dataclass(frozen=True)
class RaftView:
    """What a node knows of Raft at one moment: enough to tell what changed."""

    role: str  # "leader", "follower" or "candidate"
    term: int
    leader: str  # "" when none is known
    voters: frozenset[str]  # this node included


@dataclass(frozen=True)
class RaftEvent:
    """One change worth a log line and a counter. `kind` is the counter's label."""

    kind: str
    fields: tuple[tuple[str, object], ...]


EVENT_KINDS = ("term_changed", "election_won", "election_lost", "stepped_down", "member_added", "member_removed")


def raft_events(before: RaftView, after: RaftView) -> list[RaftEvent]:
    """The events between two views of the same node, in the order they happened.

    An election is lost when a candidate becomes a follower, or stays a candidate
    into a new term (its election timed out without a majority)."""
    events: list[RaftEvent] = []
    if after.term != before.term:
        events.append(RaftEvent("term_changed", (("from_term", before.term), ("to_term", after.term))))
    if before.role != "leader" and after.role == "leader":
        events.append(RaftEvent("election_won", (("term", after.term), ("voters", len(after.voters)))))
    elif before.role == "candidate" and (after.role == "follower" or after.term != before.term):
        events.append(RaftEvent("election_lost", (("term", before.term), ("leader", after.leader))))
    if before.role == "leader" and after.role != "leader":
        events.append(RaftEvent("stepped_down", (("term", after.term), ("role", after.role),
                                                 ("leader", after.leader))))
    for node in sorted(after.voters - before.voters):
        events.append(RaftEvent("member_added", (("member", node), ("voters", len(after.voters)))))
    for node in sorted(before.voters - after.voters):
        events.append(RaftEvent("member_removed", (("member", node), ("voters", len(after.voters)))))
    return events
