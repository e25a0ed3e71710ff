"""A pysyncobj journal that truncates only on a real conflict (Raft §5.3).

pysyncobj 0.3.17 deletes every entry after prevLogIdx whenever an AppendEntries
overlaps the follower's log, even when the overlapping entries are identical
(same index and term). With several AppendEntries in flight, a late, shorter one
then makes a follower drop entries it already acknowledged -- entries the leader
may have counted toward a commit. Measured here: a few such truncations per
second under load on loopback.

This journal defers the deletion: incoming entries that match what is stored are
skipped, the first conflicting one truncates from its position, and a tail that
matches is kept. A kept tail may also be one no leader vouched for (a deposed
leader's entries of its old term): pysyncobj would commit up to the end of the
log, so pysyncobj_adapter.commit_only_what_the_leader_sent holds the commit index
to the last entry the leader's message carried, as Raft requires.

It is durable (journal_file.DurableJournal, which says when it is flushed), and
pysyncobj_adapter.install() makes pysyncobj create this journal.
"""
from __future__ import annotations

import logging
from typing import Callable

from coordinator.replication.journal_file import DurableJournal

log = logging.getLogger(__name__)


class ConflictAwareJournal(DurableJournal):
    def __init__(self, journal_file: str, **options) -> None:  # type: ignore[no-untyped-def]
        self._cut: int | None = None  # position from which pysyncobj asked to delete
        self.on_conflict: Callable[[int], None] | None = None  # told the first index a conflict replaces
        super().__init__(journal_file, **options)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self._cut = entryFrom

    def add(self, command: bytes, idx: int, term: int) -> None:
        if self._cut is not None:
            pos = self._cut
            if pos < super().__len__():
                _, old_idx, old_term = super().__getitem__(pos)
                if old_idx == idx and old_term == term:
                    self._cut = pos + 1  # identical entry: keep it
                    return
                log.warning("raft log conflict at index %d (term %d replaces %d): truncating", idx, term, old_term)
                if self.on_conflict is not None:
                    self.on_conflict(idx)
                super().deleteEntriesFrom(pos)
            self._cut = None
        super().add(command, idx, term)

    def _settle(self) -> None:
        """Any other use of the journal ends an AppendEntries: keep the matching tail."""
        self._cut = None

    def __getitem__(self, item):  # type: ignore[override]
        self._settle()
        return super().__getitem__(item)

    def __len__(self) -> int:
        self._settle()
        return super().__len__()

    def clear(self) -> None:
        self._settle()
        super().clear()

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._settle()
        super().deleteEntriesTo(entryTo)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._settle()
        super().setRaftCommitIndex(raftCommitIndex)
