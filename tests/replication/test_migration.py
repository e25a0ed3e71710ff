"""Older, unauthenticated formats of the Raft files: refused by the journal and the
snapshot reader, converted once by migration (what `raftpoint migrate` runs), and
never signed when they hold an entry a node does not write."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pysyncobj import pickle as pysyncobj_pickle
from pysyncobj.node import TCPNode

from coordinator import fsutil
from coordinator.replication import journal_format, migration, raft_entries, snapshot_file, snapshots
from coordinator.replication.journal import ConflictAwareJournal
from coordinator.replication.journal_file import TERM_SUFFIX
from coordinator.replication.journal_format import MAGIC, JournalDamaged, JournalFormatError
from coordinator.replication import old_formats as old_format_readers
from coordinator.storage.memory import MemoryStore
from coordinator.storage.protocol import JOURNAL_FILE, SNAPSHOT_FILE, OldFormat
from tests.support.old_formats import (NO_OP, command, planted, write_crc_journal, write_pysyncobj_journal,
                                       write_v1_snapshot)

KEY = journal_format.record_key("the cluster's raft password")
SELF = "127.0.0.1:7001"
OLD = [(NO_OP, 1, 0)] + [(command(b"entry %d" % i), i, 1) for i in range(2, 6)]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "node"


def open_journal(data_dir: Path) -> ConflictAwareJournal:
    return ConflictAwareJournal(str(data_dir / JOURNAL_FILE), key=KEY)


def entries(journal: ConflictAwareJournal) -> list[tuple[bytes, int, int]]:
    return [journal[i] for i in range(len(journal))]


def term_file(data_dir: Path) -> dict:
    return json.loads(Path(str(data_dir / JOURNAL_FILE) + TERM_SUFFIX).read_text())


def refused_unchanged(data_dir: Path, name: str) -> bytes:
    """The node refuses the file naming it and the command; the file is as it was."""
    before = (data_dir / name).read_bytes()
    with pytest.raises(OldFormat, match=f"{data_dir / name} is .*`raftpoint migrate --data-dir {data_dir}`"):
        migration.refuse_old_formats(data_dir)
    assert (data_dir / name).read_bytes() == before
    return before


def test_a_journal_of_the_checksummed_format_is_refused_until_migrated(data_dir: Path) -> None:
    write_crc_journal(data_dir / JOURNAL_FILE, OLD, commit_index=4)
    with open(data_dir / JOURNAL_FILE, "ab") as f:
        f.write(old_format_readers.encode_v1(command(b"torn"), 6, 1)[:-2])  # a torn tail, never flushed
    refused_unchanged(data_dir, JOURNAL_FILE)
    with pytest.raises(OldFormat, match="raftpoint migrate"):
        open_journal(data_dir)

    [line] = migration.migrate(data_dir, KEY)
    assert "5 entries of a journal of the CRC-checked format" in line and "torn tail" in line
    migration.refuse_old_formats(data_dir)
    journal = open_journal(data_dir)
    assert entries(journal) == OLD and journal.getRaftCommitIndex() == 4
    assert (data_dir / JOURNAL_FILE).read_bytes().startswith(MAGIC)
    assert migration.migrate(data_dir, KEY) == []  # run again: nothing to do


def test_a_pysyncobj_journal_is_refused_until_migrated(data_dir: Path) -> None:
    write_pysyncobj_journal(data_dir / JOURNAL_FILE, OLD, commit_index=4)
    refused_unchanged(data_dir, JOURNAL_FILE)
    [line] = migration.migrate(data_dir, KEY)
    assert "5 entries of a pysyncobj journal" in line
    journal = open_journal(data_dir)
    assert entries(journal) == OLD
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId(), journal.getRaftCommitIndex()) == (1, "127.0.0.1:7002", 4)
    assert not Path(str(data_dir / JOURNAL_FILE) + migration.PYSYNCOBJ_META_SUFFIX).exists()


@pytest.mark.parametrize("crash_at", ["journal", "meta"])
def test_a_migration_stopped_part_way_is_finished_by_running_it_again(data_dir: Path, crash_at: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The term file is written before the journal and pysyncobj's meta file removed
    last: stopped after any step, the data dir is still migrated by the next run."""
    write_pysyncobj_journal(data_dir / JOURNAL_FILE, OLD, commit_index=4)
    meta = Path(str(data_dir / JOURNAL_FILE) + migration.PYSYNCOBJ_META_SUFFIX)
    real_write, real_remove = fsutil.atomic_write, migration._remove

    def stop(*args: object, **kwargs: object) -> None:
        raise OSError("the process was killed here")

    if crash_at == "journal":
        monkeypatch.setattr(fsutil, "atomic_write", lambda path, data, **kw: (
            stop() if path == data_dir / JOURNAL_FILE else real_write(path, data, **kw)))
    else:
        monkeypatch.setattr(migration, "_remove", lambda path: stop() if path == meta else real_remove(path))
    with pytest.raises(OSError, match="killed"):
        migration.migrate(data_dir, KEY)
    assert meta.exists()
    monkeypatch.undo()
    again = migration.migrate(data_dir, KEY)
    assert len(again) == (1 if crash_at == "journal" else 0)
    assert not meta.exists()
    journal = open_journal(data_dir)
    assert entries(journal) == OLD and (journal.getCurrentTerm(), journal.getRaftCommitIndex()) == (1, 4)


@pytest.mark.parametrize("write", [write_crc_journal, write_pysyncobj_journal])
def test_an_entry_no_node_writes_is_never_signed_nor_run(data_dir: Path, tmp_path: Path, write) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    write(data_dir / JOURNAL_FILE, OLD[:2] + [(planted(marker), 3, 1)] + OLD[3:], 4)
    before = (data_dir / JOURNAL_FILE).read_bytes()
    with pytest.raises(JournalDamaged, match=r"entry 3 is not one a node writes \(its pickle names .*open\)"):
        migration.migrate(data_dir, KEY)
    assert (data_dir / JOURNAL_FILE).read_bytes() == before
    assert not marker.exists()


def test_a_crc_journal_damaged_below_its_commit_index_is_not_migrated(data_dir: Path) -> None:
    write_crc_journal(data_dir / JOURNAL_FILE, OLD, commit_index=5)
    data = bytearray((data_dir / JOURNAL_FILE).read_bytes())
    data[-3] ^= 0x01  # in the last entry, which was durable
    (data_dir / JOURNAL_FILE).write_bytes(bytes(data))
    with pytest.raises(JournalDamaged, match="no crash's torn tail"):
        migration.migrate(data_dir, KEY)
    assert (data_dir / JOURNAL_FILE).read_bytes() == bytes(data)


def test_migrating_with_another_password_changes_nothing(data_dir: Path) -> None:
    write_crc_journal(data_dir / JOURNAL_FILE, OLD, commit_index=4)
    term = Path(str(data_dir / JOURNAL_FILE) + TERM_SUFFIX)
    term.write_text(json.dumps({**term_file(data_dir), "key_id": journal_format.key_id(KEY)}))
    before = (data_dir / JOURNAL_FILE).read_bytes(), term.read_bytes()
    with pytest.raises(JournalFormatError, match="another Raft password"):
        migration.migrate(data_dir, journal_format.record_key("another password"))
    assert ((data_dir / JOURNAL_FILE).read_bytes(), term.read_bytes()) == before


def v1_snapshot(data_dir: Path, applied_index: int) -> MemoryStore:
    store = MemoryStore()
    store.commit({b"k": b"v"}, applied_index)
    raft_json = snapshot_file.encode_raft_data(((command(b"last"), 5, 2), (command(b"previous"), 4, 2),
                                                {TCPNode(SELF)}))
    data_dir.mkdir(parents=True, exist_ok=True)
    write_v1_snapshot(data_dir / SNAPSHOT_FILE, applied_index, raft_json, store.write_image)
    return store


def test_a_snapshot_of_version_1_is_refused_until_migrated(data_dir: Path) -> None:
    store = v1_snapshot(data_dir, 4)
    path = str(data_dir / SNAPSHOT_FILE)
    refused_unchanged(data_dir, SNAPSHOT_FILE)
    with pytest.raises(snapshot_file.OldSnapshot, match="carries no MAC"):
        with snapshots.open_received(path, SELF, KEY):
            pass
    assert snapshots.existing(path) is None

    [line] = migration.migrate(data_dir, KEY)
    assert "snapshot at applied index 4 rewritten with a MAC" in line
    restored = MemoryStore()
    with snapshots.open_received(path, SELF, KEY) as received:
        restored.load_image(received.image, received.header.image_len)
    assert restored.digest_with_index() == store.digest_with_index()
    assert received.raft_data[0] == (command(b"last"), 5, 2)
    assert migration.migrate(data_dir, KEY) == []
    assert not (data_dir / (fsutil.TMP_PREFIX + SNAPSHOT_FILE)).exists()


# ---- pysyncobj's entries, read without running them -------------------------------

def test_the_entries_a_node_writes_pass_and_nothing_else_is_run(tmp_path: Path) -> None:
    membership = bytes([raft_entries.MEMBERSHIP]) + pysyncobj_pickle.dumps(["add", SELF, TCPNode(SELF)])
    for genuine in (NO_OP, command(b"x"), membership):
        assert raft_entries.problem(genuine) is None, genuine
    assert raft_entries.membership_change(membership)[2] == TCPNode(SELF)
    marker = tmp_path / "ran"
    forged_membership = bytes([raft_entries.MEMBERSHIP]) + planted(marker)[1:]
    for forged in (planted(marker), forged_membership):
        assert "its pickle names" in (raft_entries.problem(forged) or "")
    with pytest.raises(raft_entries.ForeignEntry):
        raft_entries.membership_change(forged_membership)
    assert raft_entries.problem(bytes([raft_entries.REGULAR]) + pysyncobj_pickle.dumps((0, ("a str",)))) \
        .startswith("a command of another shape")
    assert raft_entries.problem(b"") == "it is empty"
    assert not marker.exists()
