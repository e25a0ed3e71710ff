"""Reading the journal formats before the MAC: for `raftpoint migrate` only, no I/O.

- The CRC-checked format (journal_format.MAGIC_V1): the current layout with a CRC-32
  in place of the MAC. A checksum anyone can recompute, so it tells damage from a
  torn tail like the MAC does, but not a genuine record from a planted one.
- pysyncobj's own journal (raftpoint 0.1.0): a header, then records framed by their
  length before and after, no checksum; term, vote and commit index in a pickled
  `.meta` file beside it. The meta is read by an unpickler that admits no names at
  all (it holds a dict of numbers and strings), not by pysyncobj's, which admits any.

Nothing here decides whether to trust what it reads: migration does, by an
operator's explicit step, after raft_entries has checked every entry.
"""
from __future__ import annotations

import io
import pickle
import struct
import zlib
from typing import Any

from coordinator.replication.journal_format import (FIELDS, MAGIC_V1, Entry, JournalFormatError, Scan, scan_with,
                                                    whole)

RECORD_V1 = struct.Struct(">IIQQ")  # payload length, crc32, index, term

# pysyncobj 0.3.17's journal.py: name (24 bytes), version (8), format version (4),
# offset just past the last record (4); a record is size, index and term, command, size.
_PYSYNCOBJ_HEADER = struct.Struct("<24s8sII")
_PYSYNCOBJ_SIZE = struct.Struct("<I")
_PYSYNCOBJ_ENTRY = struct.Struct("<QQ")


def scan_v1(data: bytes, durable_index: int = 0) -> Scan:
    """A journal of the CRC-checked format, read as journal_format.scan reads the current one."""
    if not data.startswith(MAGIC_V1):
        raise JournalFormatError("not a journal of the CRC-checked format")
    return scan_with(data, _read_record_v1, durable_index)


def _read_record_v1(view: memoryview, pos: int) -> tuple[int, int, int, int] | str:
    record = whole(view, pos, RECORD_V1)
    if isinstance(record, str):
        return record
    (length, crc, index, term), start = record
    return (length, index, term, start) if crc == _crc_v1(view[start:start + length], index, term) \
        else "record checksum mismatch"


def _crc_v1(command: bytes | memoryview, index: int, term: int) -> int:
    return zlib.crc32(command, zlib.crc32(FIELDS.pack(len(command), index, term)))


def encode_v1(command: bytes, index: int, term: int) -> bytes:
    """A record of the CRC-checked format: for tests of the migration."""
    return RECORD_V1.pack(len(command), _crc_v1(command, index, term), index, term) + command


def pysyncobj_entries(data: bytes) -> list[Entry]:
    """The entries of a pysyncobj journal file, up to the end its header records."""
    if len(data) < _PYSYNCOBJ_HEADER.size:
        raise JournalFormatError("a pysyncobj journal shorter than its header")
    _name, _version, _format, end = _PYSYNCOBJ_HEADER.unpack_from(data)
    if end > len(data):
        raise JournalFormatError(f"a pysyncobj journal whose records end at byte {end}, past its {len(data)} bytes")
    entries: list[Entry] = []
    pos = _PYSYNCOBJ_HEADER.size
    while pos < end:
        size = _PYSYNCOBJ_SIZE.unpack_from(data, pos)[0] if pos + _PYSYNCOBJ_SIZE.size <= end else -1
        stop = pos + _PYSYNCOBJ_SIZE.size + size
        if size < _PYSYNCOBJ_ENTRY.size or stop + _PYSYNCOBJ_SIZE.size > end \
                or _PYSYNCOBJ_SIZE.unpack_from(data, stop)[0] != size:
            raise JournalFormatError(f"a pysyncobj journal with a broken record at byte {pos}")
        index, term = _PYSYNCOBJ_ENTRY.unpack_from(data, pos + _PYSYNCOBJ_SIZE.size)
        entries.append((data[pos + _PYSYNCOBJ_SIZE.size + _PYSYNCOBJ_ENTRY.size:stop], index, term))
        pos = stop + _PYSYNCOBJ_SIZE.size
    return entries


class _NoNames(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise JournalFormatError(f"pysyncobj's term file names {module}.{name}: it holds only numbers and strings")


def pysyncobj_meta(data: bytes) -> dict[str, Any]:
    """Term, vote and commit index from pysyncobj's pickled `.meta` file, in the keys of
    our term file (journal_file); empty data (no file) is an empty dict, as pysyncobj reads it."""
    if not data:
        return {}
    try:
        meta = _NoNames(io.BytesIO(data)).load()
    except JournalFormatError:
        raise
    except Exception as exc:  # a garbled pickle raises any of a dozen types
        raise JournalFormatError(f"pysyncobj's term file does not load ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict):
        raise JournalFormatError(f"pysyncobj's term file holds {type(meta).__name__}, not a dict")
    return {"term": int(meta.get("currentTerm", 0)), "voted_for": meta.get("votedForNodeId"),
            "commit_index": int(meta.get("raftCommitIndex", 1))}
