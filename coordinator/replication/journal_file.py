"""A durable Raft journal for pysyncobj: log entries and term/vote on stable storage.

Raft allows a node to act on its log only once what it acts on is on stable
storage: the current term and vote before a vote request or grant, the log entries
before the response that acknowledges them, and on a leader before it counts its
own log toward a majority. pysyncobj 0.3.17's FileJournal fsyncs neither, and
compacts by rewriting its file in place.

- Entries are appended to the file as they come (so a kill -9 loses nothing that
  reached the page cache) and marked dirty; `flush()` makes them durable with one
  fdatasync for everything appended since the last one (group commit). It runs
  before every acknowledgement and vote (pysyncobj_adapter.FlushingTransport) and,
  on a leader, before its commit index can count its own log
  (pysyncobj_adapter.LeaderWritePath). The file is fsynced once at open too: what a
  kill -9 left in the page cache is not yet durable.
- Term, vote and commit index live in a small JSON file replaced atomically (temp,
  fsync, rename, fsync of the directory); `setCurrentTerm` returns only after that.
- Compaction and `clear` write the kept entries to a new file, fsync it, rename it
  over the journal and fsync the directory: a crash leaves the old or the new file.
- A real conflict truncates the file and fsyncs before anything new is written
  over the dropped entries, so the file is always a prefix of a log that existed.
- At open, a torn tail (see journal_format) is cut off and the cut fsynced. A
  record that fails at or below the stored commit index is no torn tail: the file
  was damaged at rest, and opening raises JournalDamaged without changing it
  (cutting there would silently drop acknowledged entries after it). The stored
  commit index is never written before the entries up to it are flushed.
- Records carry a MAC keyed from the Raft password (journal_format), checked
  before pysyncobj unpickles anything. A journal of an older, unauthenticated
  format is refused (OldFormat) and read only by `raftpoint migrate` (migration).
- A log found shorter than the commit index the term file kept (a journal moved
  aside by `raftpoint repair --from-peers`, or deleted by hand) has lost entries
  this node may have acknowledged: the term file records the term it was lost in
  (LOG_LOST_KEY, which the repair command also sets) until a leader has caught the
  log up again (pysyncobj_adapter.RebuildingVoter).

Any I/O error after opening (disk full, EIO) calls `on_io_error`, by default
fail_stop: pysyncobj cannot undo a half-done step.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, NoReturn

from pysyncobj import journal as pysyncobj_journal

from coordinator import fsutil
from coordinator.replication import journal_format
from coordinator.replication.fail_stop import fail_stop
from coordinator.storage.protocol import JOURNAL_FILE, REBUILD_FROM_PEERS, TERM_FILE, OldFormat
from coordinator.replication.journal_format import MAGIC, Entry, JournalDamaged, JournalFormatError

log = logging.getLogger(__name__)

TERM_SUFFIX = TERM_FILE.removeprefix(JOURNAL_FILE)  # term, vote and commit index (JSON)
COMPACT_SUFFIX = ".compact"  # the next journal file while a compaction or clear writes it
LOG_LOST_KEY = "log_lost_in_term"  # in the term file: the log was lost in this term and is not yet rebuilt


class DurableJournal(pysyncobj_journal.Journal):
    def __init__(self, journal_file: str, *, key: bytes, on_io_error: Callable[[str], NoReturn] = fail_stop) -> None:
        """`key`: journal_format.record_key of the Raft password."""
        self._path = Path(journal_file)
        self._key = key
        self._term_path = Path(journal_file + TERM_SUFFIX)
        self._on_io_error = on_io_error
        self.on_flush: Callable[[float], None] | None = None  # fsync seconds, for metrics
        self._fd = -1
        self._dirty = False
        self._meta_saved = True
        self._open()

    # ---- opening --------------------------------------------------------------------
    def _open(self) -> None:
        """Errors here raise: a node that cannot read its journal must not start."""
        Path(str(self._path) + COMPACT_SUFFIX).unlink(missing_ok=True)  # an unfinished rewrite
        data = self._path.read_bytes() if self._path.exists() else b""
        old = journal_format.old_format(data)
        if old is not None:
            raise OldFormat.of(self._path, old)
        if not data:
            data = MAGIC
            fsutil.atomic_write(self._path, data)
        self._meta = read_term_file(self._term_path)
        check_key(self._meta, self._key, self._path)
        if "key_id" not in self._meta:
            self._meta["key_id"] = journal_format.key_id(self._key)
            write_term_file(self._term_path, self._meta)
        durable = int(self._meta.get("commit_index", 0))
        try:
            found = journal_format.scan(data, self._key, durable)
        except JournalFormatError as exc:
            raise JournalFormatError(f"{self._path}: {exc}") from None
        if found.damaged:
            raise damaged(self._path, found.problem, durable)
        if found.problem is not None:
            log.warning("journal %s: %s (an unflushed tail lost in a crash)", self._path, found.problem)
        self._note_a_lost_log(found.entries)
        self._fd = os.open(self._path, os.O_RDWR)
        if found.problem is not None and len(data) > found.end:
            os.ftruncate(self._fd, found.end)
        # Entries read back after a kill -9 may still sit only in the page cache: make
        # them durable before this node can acknowledge them to a leader (nothing
        # marks them dirty, and an identical entry sent again is not rewritten).
        fsutil.fsync_file(self._fd)
        self._entries: list[Entry] = found.entries
        self._offsets: list[int] = found.offsets
        self._end = found.end

    def _note_a_lost_log(self, entries: list[Entry]) -> None:
        """Record a lost log: the stored commit index runs past the last entry only when
        entries were removed from outside (the journal never stores a commit index
        before the entries it covers, and never truncates below it)."""
        last = entries[-1][1] if entries else 0
        durable = int(self._meta.get("commit_index", 0))
        if durable > max(last, 1) and LOG_LOST_KEY not in self._meta:
            self._meta[LOG_LOST_KEY] = self.getCurrentTerm()
            write_term_file(self._term_path, self._meta)
        if LOG_LOST_KEY in self._meta:
            log.warning("journal %s: this node's log was lost in term %s (it ends at index %d, entries up to %d "
                        "were committed): it grants no vote and stands for no election until a leader has "
                        "caught its log up", self._path, self._meta[LOG_LOST_KEY], last, durable)

    # ---- log entries ----------------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        record = journal_format.encode(self._key, command, idx, term)
        self._io(_pwrite_all, self._fd, record, self._end)
        self._entries.append((command, idx, term))
        self._offsets.append(self._end)
        self._end += len(record)
        self._dirty = True

    def flush(self) -> None:
        """Make every entry added so far durable: one fdatasync, only if needed."""
        if not self._dirty:
            return
        started = time.perf_counter()
        self._io(fsutil.fsync_file, self._fd, data_only=True)
        self._dirty = False
        if self.on_flush is not None:
            self.on_flush(time.perf_counter() - started)

    def __getitem__(self, item):  # type: ignore[no-untyped-def]  # int or slice, as pysyncobj uses it
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        cut = self._offsets[entryFrom]
        self._io(self._truncate, cut)
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._end = cut
        self._dirty = False  # the fsync covered everything before the cut too

    def _truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        fsutil.fsync_file(self._fd)

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._rewrite(self._entries[entryTo:])

    def clear(self) -> None:
        self._rewrite([])

    def _rewrite(self, entries: list[Entry]) -> None:
        data, offsets = journal_format.encode_all(self._key, entries)
        self._io(self._replace_file, data)
        self._entries, self._offsets, self._end = list(entries), offsets, len(data)
        self._dirty = False

    def _replace_file(self, data: bytes) -> None:
        tmp = Path(str(self._path) + COMPACT_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, data, 0)
            fsutil.fsync_file(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path)
        fsutil.fsync_dir(self._path.parent)
        old, self._fd = self._fd, os.open(self._path, os.O_RDWR)
        os.close(old)

    def align_to_snapshot(self, previous: Entry, last: Entry) -> None:
        """Drop the entries a snapshot ending with (previous, last) replaces.

        pysyncobj compacts the journal one tick after it renames the snapshot into
        place; after a crash in between, it would find a journal that does not start
        with the snapshot's two entries and clear it, losing the entries after the
        snapshot. Doing the compaction here first keeps them."""
        if not self._entries:
            return
        pos = previous[1] - self._entries[0][1]
        if 0 < pos < len(self._entries) - 1 and self._entries[pos] == previous and self._entries[pos + 1] == last:
            log.info("journal %s: finishing a compaction interrupted at index %d", self._path, previous[1])
            self.deleteEntriesTo(pos)

    # ---- term, vote, commit index ---------------------------------------------------
    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        self._meta["term"], self._meta["voted_for"] = term, votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> str | None:
        return self._meta.get("voted_for")

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commit_index") != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_saved = False

    def log_lost_in_term(self) -> int | None:
        """The term this node's log was lost in, while it has not been caught up since.

        Chaos seam: `repaired-votes` (chaos/planted.py) replaces it with one that drops
        the mark and answers None."""
        lost = self._meta.get(LOG_LOST_KEY)
        return None if lost is None else int(lost)

    def log_rebuilt(self) -> None:
        """A leader caught the log up: the node may vote and stand again (stored at once)."""
        if self._meta.pop(LOG_LOST_KEY, None) is not None:
            self._store_meta()

    def getRaftCommitIndex(self) -> int:
        """Never beyond the journal: a commit index is only a hint after a restart, and
        one pointing past the last entry would let a new entry count as committed."""
        last = self._entries[-1][1] if self._entries else 1
        return min(int(self._meta.get("commit_index", 1)), last)

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self.flush()  # the stored commit index never runs ahead of the durable log
            self._store_meta()

    def _store_meta(self) -> None:
        """The stored commit index tells damage from a torn tail at the next open, so
        it must never be on disk before the entries it covers."""
        self.flush()
        self._io(write_term_file, self._term_path, self._meta)
        self._meta_saved = True

    # ---- shutdown and errors --------------------------------------------------------
    def _destroy(self) -> None:
        if self._fd < 0:
            return
        self.onOneSecondTimer()
        self.flush()
        os.close(self._fd)
        self._fd = -1

    def _io(self, action: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            action(*args, **kwargs)
        except OSError as exc:
            self._on_io_error(f"journal {self._path}: {exc}")


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def mark_log_lost(journal_file: str | Path) -> bool:
    """For a stopped node whose journal is being removed: record in its term file that
    its log is lost in the term it holds. False when there is no term file (a node
    that never took part in an election has nothing to forget)."""
    term_path = Path(str(journal_file) + TERM_SUFFIX)
    if not term_path.exists():
        return False
    meta = read_term_file(term_path)
    meta.setdefault(LOG_LOST_KEY, int(meta.get("term", 0)))
    write_term_file(term_path, meta)
    return True


def read_term_file(term_path: Path) -> dict:
    """Term, vote, commit index and key id ({} when there is no file yet)."""
    if not term_path.exists():
        return {}
    try:
        meta = json.loads(term_path.read_bytes())
    except ValueError as exc:
        # Written atomically, so this is not a crash artefact: without the vote this
        # node could vote twice in a term.
        raise JournalFormatError(f"{term_path}: unreadable term/vote file: {exc}") from None
    if not isinstance(meta, dict):
        raise JournalFormatError(f"{term_path}: unreadable term/vote file: {meta!r}")
    return meta


def write_term_file(term_path: Path, meta: dict) -> None:
    """Replace the term file atomically and durably."""
    fsutil.atomic_write(term_path, json.dumps(meta, sort_keys=True).encode())


def check_key(meta: dict, key: bytes, journal_path: Path) -> None:
    """Refuse a journal written with another key before any record is judged by it:
    with the wrong key every record fails, and the scan would cut them all as torn.
    The term file names the key by its id (journal_format.key_id)."""
    stored = meta.get("key_id")
    if stored is not None and stored != journal_format.key_id(key):
        raise JournalFormatError(f"{journal_path} was written with another Raft password; use the password it was "
                                 "written with (records are authenticated with it)")


def damaged(journal_path: Path, problem: str | None, durable: int) -> JournalDamaged:
    """The refusal of a journal whose durable records no longer check out."""
    return JournalDamaged(f"journal {journal_path} is damaged: {problem}, but entries up to index {durable} were "
                          f"durable, so this is no crash's torn tail; the file is left as it is. {REBUILD_FROM_PEERS}")
