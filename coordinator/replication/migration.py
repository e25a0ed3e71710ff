"""Older formats of a node's Raft files: refused at start, converted by `raftpoint migrate`.

Earlier versions read them at start and signed what they read: the journal before
the MAC (CRC-32 records), pysyncobj's own journal with its pickled term file
(raftpoint 0.1.0), and version 1 snapshots. None of them carries a MAC, so whoever
could write the data dir could plant a pickled callable in one, and the node would
run it. A node now refuses them (`refuse_old_formats`: one line naming the file and
the command), and an operator converts them once, with the node stopped and its
Raft password (`migrate`). Even then nothing in them runs: every entry must be one
a node writes (raft_entries.problem) before it is signed; a journal holding
anything else is refused unchanged, as damage.

Each file is replaced atomically (fsutil: temp, fsync, rename, fsync of the
directory); in a pysyncobj data dir the term file goes first and the pickled
`.meta` is removed last. A crash leaves old or new files, and running the command
again finishes the job. Files already in the current format are left alone.
"""
from __future__ import annotations

import os
from pathlib import Path

from pysyncobj.node import TCPNode

from coordinator import fsutil
from coordinator.replication import journal_format, old_formats, raft_entries, snapshot_file
from coordinator.replication.journal_file import (TERM_SUFFIX, check_key, damaged, read_term_file,
                                                  write_term_file)
from coordinator.replication.journal_format import PYSYNCOBJ_MAGIC, Entry, JournalDamaged
from coordinator.storage.protocol import JOURNAL_FILE, REBUILD_FROM_PEERS, SNAPSHOT_FILE, OldFormat

PYSYNCOBJ_META_SUFFIX = ".meta"  # pysyncobj's pickled term/vote file, beside its journal
_HEAD = 16  # bytes enough to tell every journal format apart


def refuse_old_formats(data_dir: Path) -> None:
    """Raise OldFormat for a journal or snapshot in `data_dir` of an older format."""
    journal = data_dir / JOURNAL_FILE
    old = journal_format.old_format(_head(journal))
    if old is not None:
        raise OldFormat.of(journal, old)
    snapshot = data_dir / SNAPSHOT_FILE
    if _old_snapshot(snapshot):
        raise OldFormat.of(snapshot, f"a snapshot of version {snapshot_file.OLD_VERSION}")


def migrate(data_dir: Path, key: bytes) -> list[str]:
    """Convert the journal and snapshot of `data_dir` (a stopped node's) to the current
    format, MACs keyed with `key` (journal_format.record_key of the Raft password).
    Returns what was converted, one line per file (empty: everything was current).
    Raises JournalFormatError for a term file of another password (before anything is
    written), JournalDamaged for a journal that is not genuine, SnapshotFormatError
    for a snapshot that cannot be read, OSError."""
    journal = data_dir / JOURNAL_FILE
    check_key(read_term_file(Path(str(journal) + TERM_SUFFIX)), key, journal)
    done = [_migrate_journal(journal, key), _migrate_snapshot(data_dir / SNAPSHOT_FILE, key)]
    return [line for line in done if line is not None]


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD)
    except FileNotFoundError:
        return b""


def _old_snapshot(path: Path) -> bool:
    """Whether `path` is a snapshot of version 1 (any other problem is the node's to report)."""
    try:
        with open(path, "rb") as f:
            return snapshot_file.old_header(f) is not None
    except (FileNotFoundError, snapshot_file.SnapshotFormatError):
        return False


def _migrate_journal(path: Path, key: bytes) -> str | None:
    data = path.read_bytes() if path.exists() else b""
    old = journal_format.old_format(data)
    meta_path = Path(str(path) + PYSYNCOBJ_META_SUFFIX)
    if old is None:
        if meta_path.exists() and data.startswith(journal_format.MAGIC):  # a migration stopped at its last step
            _remove(meta_path)
        return None
    term_path = Path(str(path) + TERM_SUFFIX)
    if data.startswith(PYSYNCOBJ_MAGIC):
        entries = old_formats.pysyncobj_entries(data)
        meta = old_formats.pysyncobj_meta(meta_path.read_bytes() if meta_path.exists() else b"")
        tail = ""
    else:
        meta = read_term_file(term_path)
        durable = int(meta.get("commit_index", 0))
        found = old_formats.scan_v1(data, durable)
        if found.damaged:
            raise damaged(path, found.problem, durable)
        entries = found.entries
        tail = f"; dropped a torn tail never flushed ({found.problem})" if found.problem else ""
    _check_entries(path, entries)
    meta["key_id"] = journal_format.key_id(key)
    write_term_file(term_path, meta)
    fsutil.atomic_write(path, journal_format.encode_all(key, entries)[0])
    _remove(meta_path)
    return f"{path}: {len(entries)} entries of {old} rewritten with authenticated records{tail}"


def _migrate_snapshot(path: Path, key: bytes) -> str | None:
    tmp = path.with_name(fsutil.TMP_PREFIX + path.name)
    tmp.unlink(missing_ok=True)  # left by a migration that crashed before its rename
    if not path.exists():
        return None
    with open(path, "rb") as f:
        header = snapshot_file.old_header(f)
        if header is None:
            return None
        raft_json = f.read(header.raft_len)
        try:
            last, previous, _members = snapshot_file.decode_raft_data(raft_json, TCPNode)
        except (ValueError, KeyError, TypeError) as exc:
            raise snapshot_file.SnapshotFormatError(f"{path}: unreadable raft data ({exc})") from None
        _check_entries(path, [previous, last])
        snapshot_file.upgrade(f, header, raft_json, str(tmp), key)
    os.replace(tmp, path)
    fsutil.fsync_dir(path.parent)
    return f"{path}: the snapshot at applied index {header.applied_index} rewritten with a MAC"


def _check_entries(path: Path, entries: list[Entry]) -> None:
    """Refuse to sign anything a node would not have written: an old file may be planted."""
    for command, index, _term in entries:
        problem = raft_entries.problem(command)
        if problem is not None:
            raise JournalDamaged(f"{path}: entry {index} is not one a node writes ({problem}); nothing was "
                                 f"converted. {REBUILD_FROM_PEERS}")


def _remove(path: Path) -> None:
    if path.exists():
        path.unlink()
        fsutil.fsync_dir(path.parent)
