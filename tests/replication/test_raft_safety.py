"""Raft's safety rules where pysyncobj bends them, on real nodes in one process:
a follower never installs a snapshot its log already reaches (it would drop committed
entries it acknowledged), and a node whose log was lost grants no vote and stands for
no election until a leader has caught it up (it would elect a leader without the
writes it acknowledged)."""
from __future__ import annotations

import argparse
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.transport import TCPTransport

from coordinator.replication import node as node_module
from coordinator.replication import pysyncobj_adapter, snapshot_file, snapshots
from coordinator.replication.node import CoordinatorNode
from raftpoint.cli import repair
from tests.replication.test_node import Cluster, commit, create_group, register, wait_for


def last_index(node: CoordinatorNode) -> int:
    return pysyncobj_adapter.current_log_index(node)


class SnapshotsSent:
    """Counts the snapshot transfers a node finished sending (the last chunk left)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sender: CoordinatorNode) -> None:
        self.finished = 0
        self._lock = threading.Lock()
        real = TCPTransport.send

        def send(transport: TCPTransport, node: Any, message: Any) -> bool:
            chunk = message.get("serialized") if isinstance(message, dict) else None
            if chunk is not None and chunk[2] and pysyncobj_adapter.transport_owner(transport) is sender:
                with self._lock:
                    self.finished += 1
            return real(transport, node, message)

        monkeypatch.setattr(TCPTransport, "send", send)


class StaleInstalls:
    """Records every snapshot a node installs that ends below its commit index (Raft:
    the entries up to the commit index are committed, and a snapshot only replaces
    entries up to its own last one). Patch before the nodes are built: pysyncobj keeps
    the deserializer bound at construction."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stale: list[tuple[str, int, int]] = []
        real = CoordinatorNode._read_snapshot

        def read_snapshot(node: CoordinatorNode, path: str) -> tuple:
            commit = node.raftCommitIndex
            raft_data = real(node, path)
            if raft_data[0][1] < commit:
                self.stale.append((node.config.raft_address, commit, raft_data[0][1]))
            return raft_data

        monkeypatch.setattr(CoordinatorNode, "_read_snapshot", read_snapshot)


def send_snapshot_again(leader: CoordinatorNode, follower: CoordinatorNode) -> None:
    """Make the leader believe the follower needs its snapshot (as after a pause of the
    follower, when the leader's idea of it went back to a compacted index)."""
    peer = next(n for n in leader.otherNodes if n.address == follower.config.raft_address)
    leader._SyncObj__raftNextIndex[peer] = 1


def follower_past_the_leaders_snapshot(cluster: Cluster) -> tuple[CoordinatorNode, CoordinatorNode]:
    """(leader, follower) once the leader has compacted its log and the follower has
    committed well past the leader's snapshot; no write follows (the leader's next
    compaction would move its snapshot)."""
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    for i in range(1, 50):
        cluster.propose(commit(f"c-{i}", "a", i))
    leader = cluster.leader()
    wait_for(lambda: leader.last_snapshot is not None and leader.last_snapshot.applied_index > 20,
             "the leader to compact its log")
    snapshot_at = leader.last_snapshot.applied_index
    for i in range(50, 60):  # the follower's commit index moves past the leader's snapshot
        cluster.propose(commit(f"c-{i}", "a", i))
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    wait_for(lambda: follower.raftCommitIndex > snapshot_at + 5, "the follower to commit past the snapshot")
    return leader, follower


def test_a_follower_ignores_a_snapshot_that_ends_below_its_commit_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installs = StaleInstalls(monkeypatch)
    cluster = Cluster(tmp_path, compaction_min_entries=20, compaction_min_time=0.2)
    try:
        leader, follower = follower_past_the_leaders_snapshot(cluster)
        commit_before, log_end_before = follower.raftCommitIndex, last_index(follower)
        assert leader.last_snapshot.applied_index < commit_before, "the leader compacted again; nothing stale to send"

        sent = SnapshotsSent(monkeypatch, leader)
        wait_for(lambda: (send_snapshot_again(leader, follower), sent.finished)[1],
                 "the leader to send its snapshot to the follower again", timeout=10)
        wait_for(lambda: leader._SyncObj__raftMatchIndex[next(n for n in leader.otherNodes
                                                                if n.address == follower.config.raft_address)]
                 >= commit_before, "the leader to hear where the follower's log matches")
        seen = (follower.raftCommitIndex, last_index(follower))
        assert installs.stale == [] and seen[0] >= commit_before and seen[1] >= log_end_before, (
            f"a snapshot ending below the installing node's commit index was installed: {installs.stale} (node, "
            f"commit index, snapshot's last index); the follower's (commit index, last log index) went from "
            f"({commit_before}, {log_end_before}) to {seen}")

        cluster.propose(commit("c-after", "a", 60))  # replication goes on from the kept log
        wait_for(cluster.converged, "replicas to converge after the ignored snapshot")
        assert [c.index for c in follower.read_state().checkpoints("g", "a")] == list(range(1, 61))
    finally:
        cluster.close()


def test_a_snapshot_the_follower_cannot_read_replaces_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot of a format this version does not read (version 1, as a leader of an
    older version sends) is refused before it replaces the follower's own snapshot
    and log; the follower goes on once a readable one comes."""
    stops: list[str] = []

    def no_exit(message: str, code: int = 0) -> None:
        stops.append(message)
        raise RuntimeError(message)

    monkeypatch.setattr(node_module, "fail_stop", no_exit)
    cluster = Cluster(tmp_path, compaction_min_entries=20, compaction_min_time=0.2)
    try:
        leader, follower = follower_past_the_leaders_snapshot(cluster)
        wait_for(lambda: follower.last_snapshot is not None, "the follower to compact its log")
        own = snapshots.existing(follower.snapshot_path)  # what a restarted follower would read
        assert own is not None, "the follower's own snapshot does not read"
        commit_before, log_end_before = follower.raftCommitIndex, last_index(follower)

        sent = SnapshotsSent(monkeypatch, leader)
        old_format = struct.pack(">I", snapshot_file.OLD_VERSION)
        real_send = TCPTransport.send  # SnapshotsSent's: it counts what leaves

        def send_as_version_1(transport: TCPTransport, node: Any, message: Any) -> bool:
            chunk = message.get("serialized") if isinstance(message, dict) else None
            if chunk is not None and chunk[1] and pysyncobj_adapter.transport_owner(transport) is leader:
                data = chunk[0]
                at = len(snapshot_file.MAGIC)
                message = {**message, "serialized": (data[:at] + old_format + data[at + 4:], *chunk[1:])}
            return real_send(transport, node, message)

        monkeypatch.setattr(TCPTransport, "send", send_as_version_1)
        wait_for(lambda: (send_snapshot_again(leader, follower), sent.finished)[1] >= 2,
                 "the leader to send its snapshot to the follower twice", timeout=10)
        seen = (follower.raftCommitIndex, last_index(follower))
        # The follower may compact its own log meanwhile: its snapshot is then newer, and still readable.
        now = snapshots.existing(follower.snapshot_path)
        kept = now is not None and now.applied_index >= own.applied_index
        assert (stops, kept) == ([], True), (
            f"an unreadable snapshot replaced the follower's own: stops {stops}; its snapshot file went from "
            f"index {own.applied_index} to {'none this version reads' if now is None else now.applied_index}; "
            f"(commit index, last log index) "
            f"went from ({commit_before}, {log_end_before}) to {seen}")
        assert seen[0] >= commit_before and seen[1] >= log_end_before, (commit_before, log_end_before, seen)

        monkeypatch.setattr(TCPTransport, "send", real_send)
        cluster.propose(commit("c-after", "a", 60))
        wait_for(cluster.converged, "replicas to converge once readable snapshots are sent")
        assert [c.index for c in follower.read_state().checkpoints("g", "a")] == list(range(1, 61))
    finally:
        cluster.close()


def repair_from_peers(data_dir: str) -> None:
    assert repair.run(argparse.Namespace(data_dir=Path(data_dir), from_peers=True)) == 0


def writes_only_on_a_after_b_is_repaired(cluster: Cluster) -> tuple[int, int, int]:
    """(A, B, C), all stopped: C went stale, A (the leader) and B acknowledged 20 writes,
    then B was rebuilt empty by `raftpoint repair --from-peers`; only A holds the writes."""
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    wait_for(cluster.converged, "replicas to converge")
    a = next(i for i, n in cluster.nodes.items() if n.is_leader())
    b, c = (i for i in cluster.nodes if i != a)
    cluster.stop(c)
    for i in range(1, 21):  # acknowledged by A and B only
        cluster.propose(commit(f"c-{i}", "a", i))
    wait_for(lambda: cluster.nodes[b].store.applied_index == cluster.nodes[a].store.applied_index,
             "B to apply every write")
    cluster.stop(a)
    cluster.stop(b)
    repair_from_peers(cluster.config(b).data_dir)
    return a, b, c


def test_a_repaired_node_does_not_vote_until_a_leader_has_caught_it_up(tmp_path: Path) -> None:
    """The sequence that lost writes: C stale; writes acknowledged by A and B only; A and B stop;
    B rebuilt empty; B and C start. C must not win with B's vote (the writes would be
    gone); when A returns, A leads with every write, and B votes again once caught up."""
    cluster = Cluster(tmp_path)
    try:
        a, b, c = writes_only_on_a_after_b_is_repaired(cluster)

        node_b, node_c = cluster.start(b), cluster.start(c)
        term_c = node_c.raftCurrentTerm

        def two_elections_or_a_leader() -> bool:
            return node_b.is_leader() or node_c.is_leader() or node_c.raftCurrentTerm >= term_c + 2
        wait_for(two_elections_or_a_leader, "C to stand for election twice")
        leaders = [name for name, n in (("B", node_b), ("C", node_c)) if n.is_leader()]
        assert leaders == [], (f"{leaders} was elected while the only node holding the 20 acknowledged writes "
                               f"was down (C's term {node_c.raftCurrentTerm}, B's log ends at {last_index(node_b)})")

        cluster.start(a)
        leader = cluster.leader()
        assert leader is cluster.nodes[a], "only A holds every acknowledged write"
        wait_for(cluster.converged, "B and C to catch up with A")
        wait_for(lambda: pysyncobj_adapter.raft_log(node_b).log_lost_in_term() is None,
                 "B to count itself caught up")
        cluster.stop(a)  # B votes again: B and C elect a leader between them
        new_leader = cluster.leader()
        assert [x.index for x in new_leader.read_state().checkpoints("g", "a")] == list(range(1, 21))
    finally:
        cluster.close()


def test_with_the_vote_guard_off_the_lone_holder_of_the_writes_sees_its_history_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the guard prevents, and what the digest audit then says: the repaired node
    votes, C leads without the 20 writes, and when A returns the new leader replaces
    entries A had applied; A knows its history diverged (its audit says not to wipe it)."""
    from coordinator.replication.journal_file import DurableJournal
    cluster = Cluster(tmp_path)
    try:
        a, b, c = writes_only_on_a_after_b_is_repaired(cluster)
        monkeypatch.setattr(DurableJournal, "log_lost_in_term", lambda self: None)  # the guard, off
        cluster.start(b)
        cluster.start(c)
        wait_for(lambda: any(n.is_leader() for n in cluster.nodes.values()), "B and C to elect a leader")
        cluster.propose(commit("c-new", "a", 1))  # the new leader's history: no checkpoint 1 yet
        node_a = cluster.start(a)
        wait_for(lambda: node_a.replaced_applied_from() is not None,
                 "A to find that the leader replaced entries it had applied")
    finally:
        cluster.close()
