"""Snapshots as the node writes and receives them: round trip, what a restart finds, the member check."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pysyncobj.node import TCPNode

from coordinator.replication import snapshots
from coordinator.storage.memory import MemoryStore

SELF = "127.0.0.1:7001"


def raft_data(*members: str) -> tuple:
    return (b"last", 5, 2), (b"previous", 4, 2), {TCPNode(m) for m in members}


def filled_store(applied_index: int) -> MemoryStore:
    store = MemoryStore()
    store.commit({b"k": b"v"}, applied_index)
    return store


def test_a_written_snapshot_is_found_and_restores_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.snapshot")
    written = snapshots.write(path, raft_data(SELF, "127.0.0.1:7002"), filled_store(7))
    assert written.applied_index == 7 and written.size == Path(path).stat().st_size
    found = snapshots.existing(path)
    assert found is not None and (found.applied_index, found.size) == (7, written.size)
    restored = MemoryStore()
    with snapshots.open_received(path, SELF) as received:
        restored.load_image(received.image, received.header.image_len)
    assert received.header.applied_index == 7
    assert received.raft_data[:2] == ((b"last", 5, 2), (b"previous", 4, 2))
    assert sorted(str(n) for n in received.raft_data[2]) == [SELF, "127.0.0.1:7002"]
    assert restored.digest_with_index() == filled_store(7).digest_with_index()


def test_a_missing_or_foreign_file_is_no_snapshot(tmp_path: Path) -> None:
    assert snapshots.existing(str(tmp_path / "none")) is None
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"not a snapshot at all")
    assert snapshots.existing(str(foreign)) is None


@pytest.mark.parametrize("members, warned", [((SELF, "127.0.0.1:7002"), False), (("127.0.0.1:7002",), True)])
def test_a_snapshot_not_naming_this_node_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     members: tuple[str, ...], warned: bool) -> None:
    path = str(tmp_path / "raft.snapshot")
    snapshots.write(path, raft_data(*members), filled_store(3))
    with caplog.at_level(logging.WARNING, logger=snapshots.__name__):
        with snapshots.open_received(path, SELF):
            pass
    assert ("does not name this node" in caplog.text) is warned
