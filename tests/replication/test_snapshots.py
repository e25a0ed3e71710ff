"""Snapshots as the node writes and receives them: round trip, what a restart finds, the member
check, and the MAC that keeps a damaged or edited file from becoming a replica's state."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pysyncobj.node import TCPNode

from coordinator.replication import journal_format, snapshot_file, snapshots
from coordinator.replication.node import StateGap, _refuse_a_gap
from coordinator.storage.memory import MemoryStore

SELF = "127.0.0.1:7001"
KEY = journal_format.record_key("raft password")


def raft_data(*members: str) -> tuple:
    return (b"last", 5, 2), (b"previous", 4, 2), {TCPNode(m) for m in members}


def filled_store(applied_index: int) -> MemoryStore:
    store = MemoryStore()
    store.commit({b"k": b"v"}, applied_index)
    return store


def test_a_written_snapshot_is_found_and_restores_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.snapshot")
    written = snapshots.write(path, raft_data(SELF, "127.0.0.1:7002"), filled_store(7), KEY)
    assert written.applied_index == 7 and written.size == Path(path).stat().st_size
    found = snapshots.existing(path)
    assert found is not None and (found.applied_index, found.size) == (7, written.size)
    restored = MemoryStore()
    with snapshots.open_received(path, SELF, KEY) as received:
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
    snapshots.write(path, raft_data(*members), filled_store(3), KEY)
    with caplog.at_level(logging.WARNING, logger=snapshots.__name__):
        with snapshots.open_received(path, SELF, KEY):
            pass
    assert ("does not name this node" in caplog.text) is warned


def test_a_changed_byte_anywhere_after_the_magic_is_refused_before_anything_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "raft.snapshot"
    snapshots.write(str(path), raft_data(SELF), filled_store(9), KEY)
    good = path.read_bytes()
    header_end = len(snapshot_file.MAGIC) + snapshot_file.HEADER.size
    for offset in (len(snapshot_file.MAGIC) + 8, header_end + 3, header_end + 40, len(good) - 100, len(good) - 1):
        damaged = bytearray(good)
        damaged[offset] ^= 0x20
        path.write_bytes(bytes(damaged))
        with pytest.raises(snapshot_file.SnapshotFormatError):
            with snapshots.open_received(str(path), SELF, KEY):
                raise AssertionError(f"a snapshot changed at byte {offset} was opened")
    path.write_bytes(good[:-10])
    with pytest.raises(snapshot_file.SnapshotDamaged, match="truncated"):
        with snapshots.open_received(str(path), SELF, KEY):
            pass
    path.write_bytes(good)
    with pytest.raises(snapshot_file.SnapshotDamaged, match="another Raft password"):
        with snapshots.open_received(str(path), SELF, journal_format.record_key("another")):
            pass


@pytest.mark.parametrize("journal_first, store_applied, snapshot_applied, snapshot_log_end, gap", [
    (None, 0, None, 0, False),  # a new node
    (1, 0, None, 0, False),  # nothing compacted yet
    (99, 0, 100, 100, False),  # compacted: the snapshot holds up to the journal
    (99, 100, None, 0, False),  # the snapshot file lost, the store still holds everything
    (99, 0, None, 0, True),  # store and snapshot lost: entries 1..98 are gone
    (99, 50, 60, 60, True),  # both behind the journal
    # compacted after leader changes only: no-ops past the store's last state entry
    (2, 0, 0, 3, False),
    (40, 30, 30, 41, False),
])
def test_a_node_refuses_to_start_when_its_files_leave_a_gap(journal_first: int | None, store_applied: int,
                                                           snapshot_applied: int | None, snapshot_log_end: int,
                                                           gap: bool) -> None:
    snapshot = None if snapshot_applied is None else snapshots.SnapshotInfo(snapshot_applied, 0.0, 1,
                                                                             snapshot_log_end)
    if gap:
        with pytest.raises(StateGap, match="entries in between are gone"):
            _refuse_a_gap(journal_first, store_applied, snapshot)
    else:
        _refuse_a_gap(journal_first, store_applied, snapshot)
