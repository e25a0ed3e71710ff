"""A follower commits only entries its leader sent: a deposed leader's old-term tail is never applied.

The sequence a chaos run (`partition-leader`) produced: the leader is cut off from
the majority and appends a client's write it can never commit; the majority elects
a new leader, which commits that client's retry; after the heal, the new leader
brings the deposed one up to date -- with a snapshot, or with entries it already
has. pysyncobj raised the follower's commit index to min(leaderCommit, end of its
log) on those messages, which covers the deposed leader's uncommitted tail, so it
applied a write at an index where every other replica holds another entry; its
store then differed from theirs for good (the retry found the stale answer in the
dedupe table). Here the same messages are fed to one node's handler directly.
"""
from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Iterator

import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.node import TCPNode
from pysyncobj.pickle import dumps

from coordinator.replication import journal_format, pysyncobj_adapter

REGULAR = b"\x00"  # pysyncobj's command type byte of a @replicated call
OLD_TERM, NEW_TERM = 1, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Register(SyncObj):
    """A replica whose state is the list of values applied, in order."""

    def __init__(self, data: Path, me: str, peers: list[str]) -> None:
        pysyncobj_adapter.install()
        journal = str(data / "raft.journal")
        pysyncobj_adapter.use_journal_key(journal, journal_format.record_key("test-secret"))
        conf = SyncObjConf(autoTick=False, journalFile=journal, raftMinTimeout=30.0, raftMaxTimeout=31.0,
                           connectionTimeout=31.0)
        self.applied: list[str] = []
        super().__init__(me, peers, conf, transportClass=pysyncobj_adapter.FlushingTransport)

    @replicated
    def put(self, value: str) -> None:
        self.applied.append(value)

    def command(self, value: str) -> bytes:
        """The log entry payload a leader would write for put(value)."""
        return REGULAR + dumps((self._methodToID[self._getFuncName("put")], (value,)))

    def receive(self, sender: TCPNode, **message: object) -> None:
        """Hand an AppendEntries from `sender` to the node, as its transport would."""
        transport = self._SyncObj__transport  # the test plays the network
        transport._onMessageReceived(sender, {"type": "append_entries", **message})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Register, TCPNode, TCPNode]]:
    """The node under test and two peers that exist only as senders (nothing listens there)."""
    me, old_leader, new_leader = (f"127.0.0.1:{free_port()}" for _ in range(3))
    node = Register(tmp_path, me, [old_leader, new_leader])
    try:
        yield node, TCPNode(old_leader), TCPNode(new_leader)
    finally:
        node.destroy()


def deposed(node: Register, old_leader: TCPNode) -> None:
    """Entries 2 and 3 committed in the old term, and 4 that no majority ever held:
    the log a leader has when it is cut off right after appending a client's write."""
    assert node.raftCommitIndex == 1 and len(pysyncobj_adapter.raft_log(node)) == 1  # the initial no-op only
    entries = [(node.command("a"), 2, OLD_TERM), (node.command("b"), 3, OLD_TERM)]
    node.receive(old_leader, term=OLD_TERM, commit_index=3, entries=entries, prevLogIdx=1, prevLogTerm=0)
    node.receive(old_leader, term=OLD_TERM, commit_index=3, entries=[(node.command("stale"), 4, OLD_TERM)],
                 prevLogIdx=3, prevLogTerm=OLD_TERM)
    assert node.raftCommitIndex == 3


def apply_committed(node: Register) -> list[str]:
    node.doTick(0.0)
    return node.applied


def test_a_snapshot_chunk_commits_nothing_of_the_old_tail(cluster: tuple[Register, TCPNode, TCPNode]) -> None:
    node, old_leader, new_leader = cluster
    deposed(node, old_leader)
    # The new leader has compacted past this node's log, so it sends a snapshot in chunks;
    # each carries the leader's commit index, which is far beyond entry 4.
    node.receive(new_leader, term=NEW_TERM, commit_index=50, serialized=(b"first chunk", True, False))
    assert node.raftCommitIndex == 3
    assert apply_committed(node) == ["a", "b"]


def test_entries_the_node_already_has_commit_only_up_to_the_last_one_sent(
        cluster: tuple[Register, TCPNode, TCPNode]) -> None:
    node, old_leader, new_leader = cluster
    deposed(node, old_leader)
    # The new leader's log agrees up to 3; this message carries 2..3 only (a size-capped
    # batch, or a retransmission after a reset), so nothing contradicts entry 4 yet.
    same = [(node.command("a"), 2, OLD_TERM), (node.command("b"), 3, OLD_TERM)]
    node.receive(new_leader, term=NEW_TERM, commit_index=50, entries=same, prevLogIdx=1, prevLogTerm=0)
    assert node.raftCommitIndex == 3
    # A heartbeat that matches at 3 verifies nothing beyond it either.
    node.receive(new_leader, term=NEW_TERM, commit_index=50, entries=[], prevLogIdx=3, prevLogTerm=OLD_TERM)
    assert node.raftCommitIndex == 3
    assert apply_committed(node) == ["a", "b"]


def test_the_new_leaders_entries_replace_the_tail_and_commit(cluster: tuple[Register, TCPNode, TCPNode]) -> None:
    node, old_leader, new_leader = cluster
    deposed(node, old_leader)
    theirs = [(node.command("retry"), 4, NEW_TERM), (node.command("c"), 5, NEW_TERM)]
    node.receive(new_leader, term=NEW_TERM, commit_index=50, entries=theirs, prevLogIdx=3, prevLogTerm=OLD_TERM)
    assert node.raftCommitIndex == 5
    assert apply_committed(node) == ["a", "b", "retry", "c"]
    # A late copy of an earlier, shorter message neither drops nor uncommits anything.
    node.receive(new_leader, term=NEW_TERM, commit_index=50, entries=theirs[:1], prevLogIdx=3, prevLogTerm=OLD_TERM)
    assert node.raftCommitIndex == 5 and len(pysyncobj_adapter.raft_log(node)) == 5


def test_holding_back_a_deposed_leaders_tail_is_logged(cluster: tuple[Register, TCPNode, TCPNode],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    node, old_leader, new_leader = cluster
    deposed(node, old_leader)
    with caplog.at_level(logging.INFO, logger=pysyncobj_adapter.__name__):
        node.receive(new_leader, term=NEW_TERM, commit_index=50, serialized=(b"first chunk", True, False))
    assert [r.getMessage() for r in caplog.records] == [
        "commit index held at 3, not 4: the entries after it (term 1) are not yet known to match the log of "
        "the leader of term 2"]
