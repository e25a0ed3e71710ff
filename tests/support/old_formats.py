"""Raft files of the formats before the MAC, and entries that would run code if unpickled.

A planted entry opens `marker` for writing when the stock unpickler reads it: a test
that finds no marker file knows nothing unpickled it.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import BinaryIO, Callable

from pysyncobj import journal as pysyncobj_journal
from pysyncobj import pickle as pysyncobj_pickle

from coordinator.replication import journal_format, old_formats, raft_entries, snapshot_file
from coordinator.replication.journal_file import TERM_SUFFIX

Entry = tuple[bytes, int, int]
NO_OP = bytes([raft_entries.NO_OP])


def command(payload: bytes) -> bytes:
    """A call of the node's replicated method as pysyncobj logs it."""
    return bytes([raft_entries.REGULAR]) + pysyncobj_pickle.dumps((0, (payload,)))


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return open, (self.marker, "w")


def planted(marker: Path) -> bytes:
    """A replicated call whose unpickling creates `marker`."""
    return bytes([raft_entries.REGULAR]) + pickle.dumps((0, (_Planted(marker),)), protocol=2)


def write_crc_journal(journal: Path, entries: list[Entry], commit_index: int | None = None) -> None:
    """A journal of the CRC-checked format, and a term file unless `commit_index` is None."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_bytes(journal_format.MAGIC_V1 + b"".join(old_formats.encode_v1(*e) for e in entries))
    if commit_index is not None:
        Path(str(journal) + TERM_SUFFIX).write_text(json.dumps({"term": entries[-1][2], "voted_for": None,
                                                               "commit_index": commit_index}))


def write_pysyncobj_journal(journal: Path, entries: list[Entry], commit_index: int) -> None:
    """pysyncobj's own journal and pickled meta file, written by pysyncobj."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    old = pysyncobj_journal.FileJournal(str(journal))
    for entry in entries:
        old.add(*entry)
    old.setCurrentTerm(entries[-1][2], "127.0.0.1:7002")
    old.setRaftCommitIndex(commit_index)
    old.onOneSecondTimer()
    old._destroy()


def write_v1_snapshot(path: Path, applied_index: int, raft_json: bytes, write_image: Callable[[BinaryIO], int]) -> None:
    """A snapshot of version 1: the current layout without the MAC."""
    with open(path, "wb") as f:
        f.write(snapshot_file.MAGIC + snapshot_file.HEADER.pack(snapshot_file.OLD_VERSION, applied_index,
                                                                len(raft_json), 0) + raft_json)
        image_len = write_image(f)
        f.seek(len(snapshot_file.MAGIC))
        f.write(snapshot_file.HEADER.pack(snapshot_file.OLD_VERSION, applied_index, len(raft_json), image_len))
