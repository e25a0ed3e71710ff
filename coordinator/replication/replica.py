"""What the transport needs from a replica, without importing pysyncobj.

CoordinatorNode (Raft) implements it for real clusters; agent_client.testing's
in-process replica implements it for users' unit tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import BinaryIO, Callable, Protocol, runtime_checkable

from coordinator import tracing
from coordinator.core.commands import Proposal
from coordinator.storage.state import AgentChange, KvState

Callback = Callable[[bytes | list[bytes] | None, str | None], None]
# Called after a commit, from the replica's thread, with the agents whose orders or
# record the committed entries changed; None: the state was replaced (snapshot install).
ChangeListener = Callable[[list[AgentChange] | None], None]


class NotLeader(Exception):
    def __init__(self, leader_raft: str | None) -> None:
        super().__init__(f"not the leader; leader is {leader_raft or 'unknown'}")
        self.leader_raft = leader_raft


class Overloaded(Exception):
    pass


@dataclass(frozen=True)
class NodeStatus:
    """One replica's view of Raft and of its store, for health, metrics and ClusterStatus."""

    node: str  # this node's Raft address
    role: str  # "leader", "follower" or "candidate"
    term: int
    commit_index: int
    applied_index: int  # durably applied to the store
    raft_applied_index: int  # applied by Raft (ahead of applied_index until the group commit)
    log_entries: int  # entries in the journal (shrinks on compaction)
    leader: str  # Raft address of the known leader, "" if none
    has_quorum: bool
    last_snapshot_index: int  # 0: no snapshot yet
    last_snapshot_age_s: float  # -1: no snapshot yet
    last_snapshot_bytes: int
    voters: int = 1  # Raft voters, this node included
    live_voters: int = 1  # of them, this node and those it has a live connection to
    tick_lag_s: float = 0.0  # the Raft tick's worst lateness over the last second (replication.tick_lag)


@dataclass
class BatchTrace:
    """What the trace of a batch's traced proposals needs from the replica that commits
    it: their spans, which the store's commit of the entry links to,
    and, filled in by the replica, when it began to apply the entry (time.time_ns()):
    by then a majority held it. Given only when one of the proposals is traced."""

    spans: tuple[tracing.SpanRef, ...]
    committed_ns: int = 0


class AddressBook(Protocol):
    def grpc_of(self, raft_address: str | None) -> str | None: ...


class Replica(Protocol):
    config: AddressBook

    def propose(self, data: bytes, callback: Callback, decoded: Proposal | None = None,
                trace: BatchTrace | None = None) -> None:
        """callback(result, None) after durable apply -- a list of results for a batch --
        or (None, reason). `decoded`: the proposer's decoding of `data`, if it has one."""
    def read_index(self, done: Callable[[str | None], None]) -> None:
        """done(None) at a linearizable read point (read_index.ReadRounds), or done(reason)
        when there is none; raises NotLeader at once on a follower."""
    def read_state(self) -> KvState: ...
    def on_agent_changes(self, listener: ChangeListener | None) -> None:
        """Call `listener` after each commit that changes an agent's orders or record."""
    def status(self) -> NodeStatus: ...
    def digest(self) -> str: ...
    def digest_with_index(self) -> tuple[int, str]: ...
    def state_digest(self) -> str: ...
    def is_leader(self) -> bool: ...
    def leader_raft_address(self) -> str | None: ...


@runtime_checkable
class ClockAgreement(Protocol):
    """What bounds a leader's clock by its voters' (replication.voter_clocks): a
    replicated node has it; a single in-process replica, whose clock is the
    majority, does not."""

    def agreed_time(self, own: float) -> float | None:
        """On the leader, the time a majority of the voters' clocks have reached, `own`
        being this node's reading; None elsewhere or while it is not known."""


@runtime_checkable
class SnapshotSource(Protocol):
    """What a backup reads (AdminService.SaveSnapshot): a replicated node has it; the
    in-process replica, which keeps no snapshot file, does not."""

    def snapshot_covering(self, raft_index: int, timeout_s: float) -> "ExportedSnapshot":
        """A snapshot file covering the log up to `raft_index`, written for the call when
        the last one does not (blocks: call it off the event loop). TimeoutError when
        none is there within `timeout_s`."""


@dataclass
class ExportedSnapshot:
    """An open snapshot file (readable from its start to `size`, whatever replaces it
    on disk meanwhile) and what it holds; the reader closes `file`."""

    file: BinaryIO
    applied_index: int
    last_index: int
    last_term: int
    size: int


class RaftProbeFailed(Exception):
    """The address does not answer pysyncobj's key exchange with this cluster's password.
    Defined beside the Membership protocol, not in the adapter, so the transport can
    catch it without importing pysyncobj (the in-process coordinator never loads it)."""


class MembershipOutcome(Enum):
    """How Raft decided a proposed membership change."""

    APPLIED = "applied"
    NOT_APPLIED = "not applied"  # a leader change got in the way: safe to propose again on the leader
    UNKNOWN = "unknown"  # the leader stepped down before it committed: the next one may apply it
    REFUSED = "refused"  # Raft would not take it (e.g. another change is still in progress)


@runtime_checkable
class Membership(Protocol):
    """What AddNode/RemoveNode need besides the Replica: CoordinatorNode has it; a
    replica without Raft membership (the in-process one) does not."""

    def voters(self) -> tuple[frozenset[str], frozenset[str]]:
        """(every voter's Raft address, the voters this node hears from), itself included."""
    def probe_member(self, raft_address: str, timeout: float) -> None:
        """Raise RaftProbeFailed unless `raft_address` answers with this cluster's Raft password. Blocking."""
    def change_membership(self, raft_address: str, *, add: bool,
                          callback: Callable[["MembershipOutcome", str], None]) -> None:
        """Propose adding or removing one voter; callback(outcome, Raft's reason) once decided."""
    def tick_lag_since(self, since: float) -> float:
        """The Raft tick's worst lateness since `since` (monotonic seconds); 0 without a Raft thread."""
