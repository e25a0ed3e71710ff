"""The Raft journal: conflict-aware truncation, durability across reopen, torn tails,
damage at rest, authenticated records, interrupted compactions and group-commit
flushing (older formats: test_migration.py)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, NoReturn

import pytest

from coordinator import fsutil
from coordinator.replication import journal_file, journal_format
from coordinator.replication.journal import ConflictAwareJournal
from coordinator.replication.journal_format import MAGIC, RECORD, JournalDamaged, JournalFormatError


class DiskError(Exception):
    """What the tests' on_io_error raises instead of ending the process."""


def raise_disk_error(message: str) -> NoReturn:
    raise DiskError(message)


def entries(j: ConflictAwareJournal) -> list[tuple[bytes, int, int]]:
    return [j[i] for i in range(len(j))]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "raft.journal")


KEY = journal_format.record_key("the cluster's raft password")


def open_journal(path: str) -> ConflictAwareJournal:
    return ConflictAwareJournal(path, key=KEY, on_io_error=raise_disk_error)


def filled(path: str, count: int, term: int = 1) -> ConflictAwareJournal:
    j = open_journal(path)
    for idx in range(1, count + 1):
        j.add(b"c%d" % idx, idx, term)
    j.flush()
    return j


def crash(j: ConflictAwareJournal) -> None:
    """Drop the journal without any of its shutdown work (close the descriptor only)."""
    os.close(j._fd)
    j._fd = -1


def test_matching_overlap_keeps_the_tail_and_conflict_truncates(path: str) -> None:
    j = filled(path, 5)
    # A late AppendEntries with prevLogIdx=2 carrying entries 3..4, which we already hold.
    j.deleteEntriesFrom(2)
    j.add(b"c3", 3, 1)
    j.add(b"c4", 4, 1)
    assert [e[1] for e in entries(j)] == [1, 2, 3, 4, 5]  # entry 5 (acknowledged) survives
    # A real conflict: a new leader's entry 4 of term 2.
    j.deleteEntriesFrom(3)
    j.add(b"x4", 4, 2)
    assert entries(j)[3:] == [(b"x4", 4, 2)] and len(j) == 4
    j._destroy()
    reopened = open_journal(path)
    assert [(e[1], e[2]) for e in entries(reopened)] == [(1, 1), (2, 1), (3, 1), (4, 2)]
    reopened._destroy()


def test_a_conflict_is_truncated_durably_before_anything_is_written_over_it(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = filled(path, 5)
    steps: list[str] = []
    real_pwrite = journal_file.os.pwrite
    monkeypatch.setattr(fsutil, "fsync_file", lambda fd, **kw: steps.append("fsync"))
    monkeypatch.setattr(journal_file.os, "pwrite", lambda *a: (steps.append("write"), real_pwrite(*a))[1])
    j.deleteEntriesFrom(3)
    j.add(b"x4", 4, 2)
    assert steps == ["fsync", "write"]


def test_flushed_entries_survive_a_crash(path: str) -> None:
    j = filled(path, 50)
    crash(j)
    assert entries(open_journal(path)) == [(b"c%d" % i, i, 1) for i in range(1, 51)]


def test_entries_left_unflushed_by_a_kill_are_made_durable_at_open(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill -9 leaves unflushed entries in the page cache, where the restarted node
    reads them back clean: it would acknowledge them to a leader without an fsync."""
    j = open_journal(path)
    for idx in range(1, 4):
        j.add(b"c%d" % idx, idx, 1)
    crash(j)  # never flushed
    synced: list[int] = []
    real = fsutil.fsync_file
    monkeypatch.setattr(fsutil, "fsync_file", lambda fd, **kw: (synced.append(fd), real(fd, **kw)))
    again = open_journal(path)
    assert entries(again) == [(b"c%d" % i, i, 1) for i in range(1, 4)]
    assert again._fd in synced and not again._dirty


def test_term_and_vote_are_stored_before_set_current_term_returns(path: str) -> None:
    j = open_journal(path)
    j.setCurrentTerm(7, "127.0.0.1:7001")
    crash(j)  # no timer tick, no shutdown: the call itself must have stored them
    reopened = open_journal(path)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (7, "127.0.0.1:7001")
    reopened.setCurrentTerm(8, None)
    assert (open_journal(path).getCurrentTerm(), open_journal(path).getVotedForNodeId()) == (8, None)


def test_set_current_term_fsyncs_file_and_directory(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = open_journal(path)
    synced: list[str] = []
    monkeypatch.setattr(fsutil, "fsync_file", lambda fd, **kw: synced.append("file"))
    monkeypatch.setattr(fsutil, "fsync_dir", lambda p: synced.append("dir"))
    j.setCurrentTerm(3, "n1")
    assert synced == ["file", "dir"]


def test_flush_is_one_fdatasync_for_all_entries_added_since_the_last(path: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    j = open_journal(path)
    calls: list[dict] = []
    monkeypatch.setattr(fsutil, "fsync_file", lambda fd, **kw: calls.append(kw))
    for idx in range(1, 101):
        j.add(b"x", idx, 1)
    j.flush()
    j.flush()  # nothing new: no fsync
    assert calls == [{"data_only": True}]
    j.add(b"y", 101, 1)
    j.flush()
    assert len(calls) == 2


def test_commit_index_never_points_past_the_journal(path: str) -> None:
    j = filled(path, 5)
    j.setRaftCommitIndex(5)
    j.onOneSecondTimer()
    assert open_journal(path).getRaftCommitIndex() == 5
    j.deleteEntriesFrom(2)  # a lost tail: the stored commit index is only a hint
    j.add(b"x", 3, 2)
    crash(j)
    assert open_journal(path).getRaftCommitIndex() == 3


def _torn_tails(path: str) -> Iterator[tuple[str, bytes]]:
    """(what, bytes appended after 5 good records) as a power loss can leave them."""
    good = Path(path).read_bytes()
    sixth = journal_format.encode(KEY, b"c6", 6, 1)
    yield "half a header", sixth[:RECORD.size // 2]
    yield "a header without its payload", sixth[:RECORD.size]
    yield "zeros (allocated, never written)", b"\0" * 4096
    yield "a flipped payload bit", sixth[:-1] + bytes([sixth[-1] ^ 1])
    yield "a stale record of an old index", good[len(MAGIC):len(MAGIC) + len(sixth)]
    yield "a lower term", journal_format.encode(KEY, b"c6", 6, 0)


def test_a_torn_tail_is_cut_off_at_open_and_never_resurrected(path: str) -> None:
    filled(path, 5)._destroy()
    good = Path(path).read_bytes()
    for what, tail in list(_torn_tails(path)):
        Path(path).write_bytes(good + tail)
        j = open_journal(path)
        assert entries(j) == [(b"c%d" % i, i, 1) for i in range(1, 6)], what
        assert Path(path).read_bytes() == good, what  # truncated on disk too
        j.add(b"c6", 6, 1)  # appends continue cleanly after the cut
        crash(j)
        assert [e[1] for e in entries(open_journal(path))] == [1, 2, 3, 4, 5, 6], what


def test_a_valid_record_after_a_torn_one_is_dropped_too(path: str) -> None:
    filled(path, 2)._destroy()
    good = Path(path).read_bytes()
    third, fourth = journal_format.encode(KEY, b"c3", 3, 1), journal_format.encode(KEY, b"c4", 4, 1)
    Path(path).write_bytes(good + third[:-1] + b"?" + fourth)  # 3 written partially, 4 fully
    assert [e[1] for e in entries(open_journal(path))] == [1, 2]


# ---- damage at rest: a durable record that no longer checks out ----------------------------

def committed(path: str, count: int) -> bytes:
    """A journal of `count` flushed entries, all committed, closed cleanly; its bytes."""
    j = filled(path, count)
    j.setRaftCommitIndex(count)
    j._destroy()
    return Path(path).read_bytes()


def record_offset(data: bytes, position: int) -> int:
    return journal_format.scan(data, KEY).offsets[position]


@pytest.mark.parametrize("where", ["payload", "header"])
def test_a_flipped_bit_in_a_durable_record_stops_the_open_and_changes_nothing(path: str, where: str) -> None:
    good = committed(path, 40)
    offset = record_offset(good, 10) + (RECORD.size if where == "payload" else 1)
    damaged = bytearray(good)
    damaged[offset] ^= 0x10
    Path(path).write_bytes(bytes(damaged))
    with pytest.raises(JournalDamaged, match=r"damaged: .* entries up to index 40 were durable.*peers"):
        open_journal(path)
    assert Path(path).read_bytes() == bytes(damaged)  # the 29 entries after it are still there to rebuild from


def test_a_damaged_first_record_is_told_by_the_genuine_records_after_it(path: str) -> None:
    good = committed(path, 5)
    damaged = bytearray(good)
    damaged[len(MAGIC) + RECORD.size] ^= 1
    Path(path).write_bytes(bytes(damaged))
    with pytest.raises(JournalDamaged):
        open_journal(path)


def test_a_torn_record_beyond_the_stored_commit_index_is_still_a_torn_tail(path: str) -> None:
    good = committed(path, 5)
    j = open_journal(path)
    j.add(b"c6", 6, 1)  # appended, never flushed, never committed
    crash(j)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert len(open_journal(path)) == 5
    assert Path(path).read_bytes() == good


def test_the_commit_index_is_stored_only_after_the_entries_it_covers_are_flushed(path: str) -> None:
    j = filled(path, 3)
    j.add(b"c4", 4, 1)  # not flushed yet
    j.setRaftCommitIndex(4)
    j.setCurrentTerm(2, "n1")  # stores the commit index with the vote
    assert not j._dirty  # so entry 4 was flushed first


def test_a_record_written_without_the_clusters_key_is_never_loaded(path: str) -> None:
    """Rewriting a record in the data dir (to make pysyncobj unpickle something else)
    needs the key: without it the record is refused before anything reads it."""
    good = committed(path, 5)
    forged = journal_format.encode(journal_format.record_key("a guess"), b"cos\nsystem\n...", 3, 1)
    offsets = journal_format.scan(good, KEY).offsets
    Path(path).write_bytes(good[:offsets[2]] + forged + good[offsets[3]:])
    with pytest.raises(JournalDamaged, match="fails authentication"):
        open_journal(path)
    Path(path).write_bytes(good + journal_format.encode(journal_format.record_key("a guess"), b"x", 6, 1))
    assert len(open_journal(path)) == 5  # past the commit index: dropped like a torn tail, never loaded


def test_another_raft_password_cannot_read_the_journal(path: str) -> None:
    committed(path, 3)
    with pytest.raises(JournalFormatError, match="another Raft password"):
        ConflictAwareJournal(path, key=journal_format.record_key("changed"), on_io_error=raise_disk_error)


def test_a_foreign_file_is_refused_unchanged(path: str) -> None:
    Path(path).write_bytes(b"something else entirely")
    with pytest.raises(JournalFormatError, match="not a raftpoint journal"):
        open_journal(path)
    assert Path(path).read_bytes() == b"something else entirely"


def test_a_corrupt_term_file_is_refused(path: str) -> None:
    open_journal(path).setCurrentTerm(2, "n1")
    Path(path + journal_file.TERM_SUFFIX).write_bytes(b"{not json")
    with pytest.raises(JournalFormatError, match="term/vote"):
        open_journal(path)


# ---- compaction: a crash at every step leaves the old or the new journal ----------------

class Crash(Exception):
    pass


def _crash_in_rewrite(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Make the next compaction stop at `step`, as if the process died there."""
    if step == "writing the new file":
        real = journal_file._pwrite_all

        def half(fd: int, data: bytes, offset: int) -> None:
            real(fd, data[:len(data) // 2], offset)
            raise Crash(step)
        monkeypatch.setattr(journal_file, "_pwrite_all", half)
    elif step == "before the rename":
        monkeypatch.setattr(journal_file.os, "replace", _raiser(step))
    elif step == "before the directory fsync":
        monkeypatch.setattr(fsutil, "fsync_dir", _raiser(step))
    elif step != "after the directory fsync":
        raise AssertionError(step)


def _raiser(step: str):  # type: ignore[no-untyped-def]
    def fail(*args: object, **kwargs: object) -> None:
        raise Crash(step)
    return fail


@pytest.mark.parametrize("step", ["writing the new file", "before the rename", "before the directory fsync",
                                  "after the directory fsync"])
def test_compaction_interrupted_at_each_step(path: str, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = filled(path, 10)
    j.add(b"c11", 11, 1)  # appended after the last flush: the compaction makes it durable
    with monkeypatch.context() as patch:
        _crash_in_rewrite(patch, step)
        try:
            j.deleteEntriesTo(4)  # keep entries 5..11
        except Crash:
            pass
    crash(j)
    reopened = open_journal(path)
    got = entries(reopened)
    assert not Path(path + journal_file.COMPACT_SUFFIX).exists()
    assert got[-7:] == [(b"c%d" % i, i, 1) for i in range(5, 12)], step
    assert [e[1] for e in got] in (list(range(1, 12)), list(range(5, 12))), step
    # pysyncobj's next start loads the snapshot (entries 5 and 6) and expects the
    # journal to begin with them; a journal left uncompacted is aligned, not cleared.
    reopened.align_to_snapshot((b"c5", 5, 1), (b"c6", 6, 1))
    assert entries(reopened) == [(b"c%d" % i, i, 1) for i in range(5, 12)], step


def test_compaction_syncs_the_new_file_before_the_rename_and_the_directory_after(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = filled(path, 5)
    steps: list[str] = []
    real_replace = os.replace
    monkeypatch.setattr(fsutil, "fsync_file", lambda fd, **kw: steps.append("fsync file"))
    monkeypatch.setattr(fsutil, "fsync_dir", lambda p: steps.append("fsync dir"))
    monkeypatch.setattr(journal_file.os, "replace", lambda a, b: (steps.append("rename"), real_replace(a, b)))
    j.deleteEntriesTo(3)
    assert steps == ["fsync file", "rename", "fsync dir"]


def test_align_to_snapshot_keeps_a_journal_that_does_not_match(path: str) -> None:
    j = filled(path, 6)
    j.align_to_snapshot((b"c3", 3, 2), (b"c4", 4, 2))  # other terms: not this log's entries
    j.align_to_snapshot((b"c9", 9, 1), (b"c10", 10, 1))  # beyond the journal
    assert len(j) == 6


def test_clear_is_atomic(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = filled(path, 3)
    with monkeypatch.context() as patch:
        _crash_in_rewrite(patch, "before the rename")
        with pytest.raises(Crash):
            j.clear()
    crash(j)
    assert len(open_journal(path)) == 3
    j = open_journal(path)
    j.clear()
    j.add(b"s1", 40, 3)
    j.add(b"s2", 41, 3)
    crash(j)
    assert entries(open_journal(path)) == [(b"s1", 40, 3), (b"s2", 41, 3)]


# ---- disk errors ----------------------------------------------------------------------

def test_io_errors_go_to_the_handler_and_leave_memory_as_on_disk(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    j = filled(path, 3)

    def no_space(*args: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(journal_file.os, "pwrite", no_space)
    with pytest.raises(DiskError, match="No space left"):
        j.add(b"c4", 4, 1)
    assert len(j) == 3
    monkeypatch.setattr(fsutil, "fsync_file", no_space)
    with pytest.raises(DiskError):
        j.setCurrentTerm(5, "n1")


def test_a_log_found_shorter_than_its_stored_commit_index_is_lost_until_rebuilt(path: str) -> None:
    j = filled(path, 5)
    j.setCurrentTerm(4, "n1")
    j.setRaftCommitIndex(5)
    j._destroy()
    os.unlink(path)  # removed by hand; the term file kept
    lost = open_journal(path)
    assert (len(lost), lost.log_lost_in_term()) == (0, 4)
    lost._destroy()
    again = open_journal(path)
    assert again.log_lost_in_term() == 4, "the mark did not survive a restart"
    for idx in range(1, 7):  # caught up by a leader
        again.add(b"c%d" % idx, idx, 5)
    again.log_rebuilt()
    crash(again)
    assert open_journal(path).log_lost_in_term() is None, "log_rebuilt was not stored at once"


def test_a_node_that_only_voted_has_lost_no_log(path: str) -> None:
    j = open_journal(path)
    j.setCurrentTerm(3, "n1")
    j._destroy()
    assert open_journal(path).log_lost_in_term() is None


def test_the_repair_mark_is_kept_until_rebuilt(path: str) -> None:
    j = filled(path, 2)
    j.setCurrentTerm(6, None)
    j._destroy()
    assert journal_file.mark_log_lost(path) is True
    assert open_journal(path).log_lost_in_term() == 6
    assert journal_file.mark_log_lost(str(Path(path).parent / "other.journal")) is False  # no term file


def test_a_conflict_names_the_first_index_it_replaces(path: str) -> None:
    j = filled(path, 5)
    seen: list[int] = []
    j.on_conflict = seen.append
    j.deleteEntriesFrom(2)
    j.add(b"c3", 3, 1)  # the same entry: no conflict
    j.add(b"x4", 4, 2)
    assert seen == [4] and [e[1] for e in entries(j)] == [1, 2, 3, 4]
