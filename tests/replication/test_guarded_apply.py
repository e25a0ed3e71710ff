"""How pysyncobj applies committed entries on a real node (pysyncobj_adapter.GuardedApply):
what the store holds is skipped unread at a restart, and an entry whose apply raises
stops the node with one line instead of being retried at every tick."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from coordinator.replication import journal_format, pysyncobj_adapter
from coordinator.replication import node as node_module
from coordinator.replication.fail_stop import EXIT_APPLY_FAILED
from coordinator.storage.protocol import JOURNAL_FILE
from tests.replication.test_node import (DEADLINE, Cluster, create_group, one_node_with_checkpoints, register,
                                         wait_for)
from tests.support.old_formats import planted


def test_entries_the_store_holds_are_not_unpickled_at_a_restart(tmp_path: Path) -> None:
    """An entry at or below the store's applied index is skipped before pysyncobj reads
    it: one that would create a marker file when unpickled creates none."""
    cluster = one_node_with_checkpoints(tmp_path, 3)
    try:
        node = cluster.nodes[0]
        node._committer.drain()
        stored, digest = node.store.applied_index, node.digest()
    finally:
        cluster.close()
    journal = Path(cluster.config(0).data_dir) / JOURNAL_FILE
    key = journal_format.record_key(cluster.config(0).password())
    found = journal_format.scan(journal.read_bytes(), key)
    marker = tmp_path / "ran"
    target = next(i for i, (_, index, _) in enumerate(found.entries) if index == stored - 1)
    _command, index, term = found.entries[target]
    found.entries[target] = (planted(marker), index, term)  # genuine key: the MAC holds, the index does not
    journal.write_bytes(journal_format.encode_all(key, found.entries)[0])
    last = found.entries[-1][1]

    restarted = cluster.start(0)
    try:
        wait_for(lambda: marker.exists() or restarted.status().raft_applied_index >= last,
                 f"the replay up to index {last} (marker {marker})")
        assert not marker.exists(), f"entry {index} (store applied index {stored}) was unpickled"
        assert restarted.store.applied_index == stored and restarted.digest() == digest
    finally:
        cluster.close()


def test_an_entry_whose_apply_raises_stops_the_node_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(tmp_path, size=1)
    stops: list[tuple[str, int]] = []
    stopped = threading.Event()

    def fail_stop(message: str, code: int) -> None:  # the process would end here
        stops.append((message, code))
        stopped.set()

    real_apply = node_module.apply_entry_bytes

    def apply(records, data, decoded=None):  # type: ignore[no-untyped-def]
        if b"bug-1" in data:
            return {}["a key the state machine assumed"]
        return real_apply(records, data, decoded)

    try:
        cluster.propose(create_group())
        node = cluster.leader()
        monkeypatch.setattr(node_module, "fail_stop", fail_stop)
        monkeypatch.setattr(node_module, "apply_entry_bytes", apply)
        failing = pysyncobj_adapter.current_log_index(node) + 1  # nothing else is proposed meanwhile
        with caplog.at_level(logging.ERROR):
            node.propose(register("bug-1", "a").SerializeToString(), lambda result, error: None)
            assert stopped.wait(DEADLINE), "the node did not stop on an entry it could not apply"
            cluster.propose(register("r-2", "b"))  # the next entry is applied: the failed one was not retried
    finally:
        monkeypatch.undo()
        cluster.close()
    [(message, code)] = stops
    assert code == EXIT_APPLY_FAILED
    assert "\n" not in message
    assert f"log entry {failing} could not be applied: KeyError: 'a key the state machine assumed'" in message
    assert "test_guarded_apply.py" in message, message  # where it was raised
    assert "failed _onTick" not in caplog.text
