"""The on-disk format of the Raft journal: encoding and scanning, no I/O.

Layout: MAGIC, then records back to back. A record is a RECORD header (payload
length, CRC-32, log index, log term) followed by the payload (a pysyncobj command).
The CRC covers the length, index, term and payload.

Why a CRC and a length per record: the journal is appended without an fsync per
entry (group commit), so after a power loss its tail may hold a partially written
record, zeros, or blocks of an older record. A scan accepts records only while
each one is whole, checks out, and continues the log (index previous + 1, term not
lower); the first that does not ends the journal. Nothing after it was ever
flushed, so nothing after it was acknowledged.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

MAGIC = b"RPJRNL\x00\x01"
PYSYNCOBJ_MAGIC = b"PYSYNCOBJ"  # the mmap journal of pysyncobj (raftpoint 0.1.0 data dirs)
RECORD = struct.Struct(">IIQQ")  # payload length, crc32, index, term
_CRC_FIELDS = struct.Struct(">IQQ")  # what the CRC covers besides the payload

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj stores log entries


class JournalFormatError(ValueError):
    """The file is not a journal this version can read; nothing was changed."""


def encode(command: bytes, index: int, term: int) -> bytes:
    return RECORD.pack(len(command), _crc(command, index, term), index, term) + command


def _crc(command: bytes | memoryview, index: int, term: int) -> int:
    return zlib.crc32(command, zlib.crc32(_CRC_FIELDS.pack(len(command), index, term)))


@dataclass
class Scan:
    """The valid prefix of a journal file. `offsets[i]` is where entry i's record
    starts; `end` is just past the last valid record; `problem` says why the scan
    stopped before the end of the data (None: it did not)."""
    entries: list[Entry] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    end: int = len(MAGIC)
    problem: str | None = None


def scan(data: bytes) -> Scan:
    """Parse a whole journal file (MAGIC included)."""
    if data[:len(MAGIC)] != MAGIC:
        raise JournalFormatError(f"not a raftpoint journal (starts with {bytes(data[:len(MAGIC)])!r})")
    view = memoryview(data)
    result = Scan()
    pos = len(MAGIC)
    while pos < len(data):
        problem = _check_record(view, pos, result.entries[-1] if result.entries else None)
        if isinstance(problem, str):
            result.problem = f"{problem} at byte {pos}; {len(data) - pos} bytes dropped"
            break
        length, index, term = problem
        start = pos + RECORD.size
        result.entries.append((bytes(view[start:start + length]), index, term))
        result.offsets.append(pos)
        pos = start + length
    result.end = pos
    return result


def _check_record(view: memoryview, pos: int, previous: Entry | None) -> tuple[int, int, int] | str:
    """(length, index, term) of the record at pos, or why it is not a valid continuation."""
    if len(view) - pos < RECORD.size:
        return "torn record header"
    length, crc, index, term = RECORD.unpack_from(view, pos)
    start = pos + RECORD.size
    if length > len(view) - start:
        return f"record of {length} bytes runs past the end of the file"
    if crc != _crc(view[start:start + length], index, term):
        return "record checksum mismatch"
    if previous is not None and (index != previous[1] + 1 or term < previous[2]):
        return f"record (index {index}, term {term}) does not follow (index {previous[1]}, term {previous[2]})"
    return length, index, term


def encode_all(entries: list[Entry]) -> tuple[bytes, list[int]]:
    """A whole journal file holding `entries`, and each record's offset."""
    parts, offsets, pos = [MAGIC], [], len(MAGIC)
    for command, index, term in entries:
        record = encode(command, index, term)
        parts.append(record)
        offsets.append(pos)
        pos += len(record)
    return b"".join(parts), offsets
