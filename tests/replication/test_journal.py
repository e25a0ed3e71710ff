"""The journal keeps acknowledged entries when an overlapping AppendEntries repeats them."""
from __future__ import annotations

from pathlib import Path

from coordinator.replication.journal import ConflictAwareJournal


def entries(j: ConflictAwareJournal) -> list[tuple[bytes, int, int]]:
    return [j[i] for i in range(len(j))]


def test_matching_overlap_keeps_the_tail_and_conflict_truncates(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.journal")
    j = ConflictAwareJournal(path)
    for idx in range(1, 6):
        j.add(b"c%d" % idx, idx, 1)
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
    reopened = ConflictAwareJournal(path)
    assert [(e[1], e[2]) for e in entries(reopened)] == [(1, 1), (2, 1), (3, 1), (4, 2)]
    reopened._destroy()
