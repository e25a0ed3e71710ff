"""Raft's persistence rule on real pysyncobj nodes: no message leaves a node while its
journal holds unflushed entries, and an acknowledgement follows the flush."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pysyncobj.transport import TCPTransport

from coordinator.core.commands import CheckpointResult
from coordinator.replication.journal import ConflictAwareJournal
from tests.replication.test_node import Cluster, commit, create_group, register, wait_for


class SendsWhileDirty:
    """Wraps the transport's real send (the one FlushingTransport calls after its flush)
    and records every message that was about to leave with unflushed entries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: dict[str, int] = {}
        self.dirty: list[str] = []
        self._lock = threading.Lock()
        real = TCPTransport.send

        def send(transport: TCPTransport, node, message) -> bool:  # type: ignore[no-untyped-def]
            journal = transport._syncObj._SyncObj__raftLog
            with self._lock:
                self.sent[message["type"]] = self.sent.get(message["type"], 0) + 1
                if journal._dirty:
                    self.dirty.append(message["type"])
            return real(transport, node, message)

        monkeypatch.setattr(TCPTransport, "send", send)


def test_no_message_leaves_with_unflushed_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sends = SendsWhileDirty(monkeypatch)
    cluster = Cluster(tmp_path)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        for i in range(1, 30):
            cluster.propose(commit(f"c-{i}", "a", i))
        wait_for(cluster.converged, "replicas to converge")
    finally:
        cluster.close()
    assert sends.sent.get("append_entries", 0) > 30 and sends.sent.get("next_node_idx", 0) > 30
    assert sends.dirty == []


def test_a_single_node_acknowledges_only_flushed_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No peer means no send: the flush in front of the store commit is the only one."""
    cluster = Cluster(tmp_path, size=1)
    seen: list[bool] = []
    node = cluster.leader()
    real_propose = node.propose

    def propose(data: bytes, callback) -> None:  # type: ignore[no-untyped-def]
        journal: ConflictAwareJournal = node._SyncObj__raftLog
        real_propose(data, lambda result, error: (seen.append(journal._dirty), callback(result, error)))

    monkeypatch.setattr(node, "propose", propose)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        assert isinstance(cluster.propose(commit("c-1", "a", 1)), CheckpointResult)
    finally:
        cluster.close()
    assert seen == [False, False, False]
