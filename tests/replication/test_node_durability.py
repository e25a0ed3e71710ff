"""Raft's persistence rule on real pysyncobj nodes: no acknowledgement or vote leaves a
node while its journal holds unflushed entries, a leader counts its own log toward a
commit only once flushed (its AppendEntries may leave first, so the flush overlaps the
round trip), and a node that cannot store committed entries stops instead of carrying on."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import NoReturn

import pytest
from pysyncobj.transport import TCPTransport

from coordinator.core.commands import CheckpointResult
from coordinator.replication import node as node_module
from coordinator.replication import pysyncobj_adapter
from coordinator.replication.fail_stop import EXIT_IO_ERROR
from coordinator.replication.journal import ConflictAwareJournal
from coordinator.storage import StoreIOError
from tests.replication.test_node import DEADLINE, Cluster, cluster_fixture, commit, create_group, register, wait_for  # noqa: F401


class SendsWhileDirty:
    """Wraps the transport's real send (the one FlushingTransport calls after its flush)
    and records every message that was about to leave with unflushed entries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: dict[str, int] = {}
        self.dirty: list[str] = []
        self._lock = threading.Lock()
        real = TCPTransport.send

        def send(transport: TCPTransport, node, message) -> bool:  # type: ignore[no-untyped-def]
            journal = pysyncobj_adapter.raft_log(pysyncobj_adapter.transport_owner(transport))
            with self._lock:
                self.sent[message["type"]] = self.sent.get(message["type"], 0) + 1
                if journal._dirty:
                    self.dirty.append(message["type"])
            return real(transport, node, message)

        monkeypatch.setattr(TCPTransport, "send", send)


class LeaderCommitsWhileDirty:
    """Records every rise of a leader's commit index made while its journal held
    unflushed entries (pysyncobj stores the new index through the journal)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cluster: Cluster | None) -> None:
        """`cluster` None: every journal's (a one-node cluster's node leads from its
        first tick, before the test can know it)."""
        self.rises = 0
        self.dirty: list[int] = []
        real = ConflictAwareJournal.setRaftCommitIndex
        owners = {id(pysyncobj_adapter.raft_log(n)): n for n in (cluster.nodes.values() if cluster else ())}

        def leads(journal: ConflictAwareJournal) -> bool:
            owner = owners.get(id(journal))
            return cluster is None or (owner is not None and owner.is_leader())

        def set_commit(journal: ConflictAwareJournal, index: int) -> None:
            if leads(journal) and index > journal.getRaftCommitIndex():
                self.rises += 1
                if journal._dirty:
                    self.dirty.append(index)
            real(journal, index)

        monkeypatch.setattr(ConflictAwareJournal, "setRaftCommitIndex", set_commit)


def test_no_acknowledgement_leaves_and_no_commit_counts_unflushed_entries(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    sends = SendsWhileDirty(monkeypatch)  # FlushingTransport.send calls the patched base after its flush
    commits = LeaderCommitsWhileDirty(monkeypatch, cluster)
    entries = [create_group(), register("r-1", "a")] + [commit(f"c-{i}", "a", i) for i in range(1, 30)]
    for entry in entries:
        cluster.propose(entry)
    wait_for(cluster.converged, "replicas to converge")
    assert sends.sent.get("append_entries", 0) > len(entries) and sends.sent.get("next_node_idx", 0) > len(entries)
    assert [kind for kind in sends.dirty if kind != "append_entries"] == []
    assert commits.rises >= len(entries) // 2 and commits.dirty == []


def test_a_single_node_acknowledges_only_flushed_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No peer means no send: its commits count its own log alone, from the no-op of
    its first election on, in the same tick as the entries are added."""
    commits = LeaderCommitsWhileDirty(monkeypatch, None)
    cluster = Cluster(tmp_path, size=1)
    seen: list[bool] = []
    node = cluster.leader()
    real_propose = node.propose

    def propose(data: bytes, callback) -> None:  # type: ignore[no-untyped-def]
        journal: ConflictAwareJournal = pysyncobj_adapter.raft_log(node)
        real_propose(data, lambda result, error: (seen.append(journal._dirty), callback(result, error)))

    monkeypatch.setattr(node, "propose", propose)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        assert isinstance(cluster.propose(commit("c-1", "a", 1)), CheckpointResult)
    finally:
        cluster.close()
    assert seen == [False, False, False]
    assert commits.rises >= 3 and commits.dirty == []


def test_a_store_that_cannot_commit_stops_the_node_and_what_it_acknowledged_is_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An acknowledgement follows the journal's flush and the apply, not the store's
    commit: a store that then fails stops the node, and the next start replays the
    acknowledged entry from the journal."""
    cluster = Cluster(tmp_path, size=1)
    stops: list[tuple[str, int]] = []
    answers: list[tuple[object, object]] = []
    node = cluster.leader()
    try:
        cluster.propose(create_group())
        def fail_stop(message: str, code: int) -> NoReturn:
            stops.append((message, code))
            raise RuntimeError("the process would have ended here")
        monkeypatch.setattr(node_module, "fail_stop", fail_stop)

        def disk_full(writes: object, applied_index: int) -> None:
            raise StoreIOError("mdb_txn_commit: No space left on device; nothing was written")
        monkeypatch.setattr(node.store, "commit", disk_full)
        node.propose(register("r-1", "a").SerializeToString(), lambda result, error: answers.append((result, error)))
        wait_for(lambda: stops and answers, "the node to answer and to stop")
        answered = list(answers)
    finally:
        monkeypatch.undo()
        cluster.close()
    assert stops[0][1] == EXIT_IO_ERROR and "No space left" in stops[0][0]
    assert answered[0][1] is None, f"acknowledged once committed and applied: {answered}"
    restarted = cluster.start(0)
    wait_for(lambda: restarted.read_state().agent("g", "a") is not None, "the journal's replay of the acknowledged write")


def test_an_acknowledged_write_is_read_before_the_store_has_committed_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store commit runs after the answer (store_committer): until it is done, the
    node's readers see the write above the store, so a client that reads right after
    its acknowledgement (a keepalive after a re-registration) never sees it undone."""
    cluster = Cluster(tmp_path, size=1)
    node = cluster.leader()
    release = threading.Event()
    try:
        cluster.propose(create_group())
        node._committer.drain()  # the group is in the store: what follows is the only commit held
        real = node.store.commit

        def held(writes: object, applied_index: int) -> None:
            assert release.wait(DEADLINE), "the test never released the store"
            real(writes, applied_index)
        monkeypatch.setattr(node.store, "commit", held)
        stored = node.store.applied_index
        cluster.propose(register("r-1", "a"))  # answered while the store is held
        assert node.store.applied_index == stored, "the answer waited for the store after all"
        assert node.read_state().agent("g", "a") is not None, "an acknowledged write was not readable"
        release.set()
        wait_for(lambda: node.store.applied_index > stored, "the held store commit")
        assert node.read_state().agent("g", "a") is not None
    finally:
        release.set()
        cluster.close()


def test_writes_whose_store_commit_was_lost_are_replayed_from_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's store commits are dropped (as a crash before the background commit):
    every acknowledged write is still there on every node once the leader restarts,
    replayed from its journal from the store's applied index on."""
    cluster = Cluster(tmp_path)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        wait_for(cluster.converged, "replicas to converge")
        leader = cluster.leader()
        index = next(i for i, n in cluster.nodes.items() if n is leader)
        # The store commits in the background: everything applied so far is in it first.
        wait_for(lambda: leader.status().applied_index == leader.status().raft_applied_index,
                 "the leader's store to hold what it applied")
        stored = leader.store.applied_index
        monkeypatch.setattr(leader.store, "commit", lambda writes, applied_index: None)
        for i in range(1, 11):
            assert isinstance(cluster.propose(commit(f"c-{i}", "a", i), leader), CheckpointResult)
        assert leader.store.applied_index == stored, "the store committed after all"
        cluster.stop(index)
        monkeypatch.undo()
        cluster.start(index)
        wait_for(lambda: cluster.converged() and all(
            [c.index for c in n.read_state().checkpoints("g", "a")] == list(range(1, 11)) for n in cluster.nodes.values()),
            "every node to hold the ten acknowledged writes")
    finally:
        cluster.close()

