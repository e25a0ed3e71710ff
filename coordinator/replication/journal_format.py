"""The on-disk format of the Raft journal: encoding and scanning, no I/O.

Layout: MAGIC, then records back to back. A record is a RECORD header (payload
length, log index, log term, MAC) followed by the payload (a pysyncobj command).
The MAC is an HMAC-SHA256 over the length, index, term and payload, keyed from
the Raft password (`record_key`).

Why a MAC rather than a checksum: pysyncobj unpickles every command it applies,
so whoever could rewrite one journal record could run code in the node at its
next start. A record is now believed only if it was written with the cluster's
key -- before anything in it is unpickled. It also catches every bit flip a CRC
would.

Why a length and a MAC per record: the journal is appended without an fsync per
entry (group commit), so after a power loss its tail may hold a partially written
record, zeros, or blocks of an older record. A scan accepts records only while
each one is whole, checks out, and continues the log (index previous + 1, term not
lower); the first that does not ends the journal. Nothing after it was flushed,
so nothing after it was acknowledged -- unless the journal's own durable commit
index says otherwise: a record that fails at or below it was durable once, so
the file was damaged at rest, not torn by a crash (`Scan.damaged`).

Journals of the older formats (OLD_FORMATS: CRC-32 records, and pysyncobj's own
journal) are never read here: they are unauthenticated, so a node refuses them at
start, and `raftpoint migrate` converts them (old_formats, migration).
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field
from typing import Callable

from coordinator.storage.protocol import DamagedAtRest

MAGIC = b"RPJRNL\x00\x02"
MAGIC_V1 = b"RPJRNL\x00\x01"  # CRC-32 records (raftpoint up to the MAC)
PYSYNCOBJ_MAGIC = b"PYSYNCOBJ"  # the mmap journal of pysyncobj (raftpoint 0.1.0 data dirs)
OLD_FORMATS = {MAGIC_V1: "a journal of the CRC-checked format", PYSYNCOBJ_MAGIC: "a pysyncobj journal"}
FIELDS = struct.Struct(">IQQ")  # payload length, index, term: what the MAC covers besides the payload
MAC_SIZE = 32
RECORD = struct.Struct(f">IQQ{MAC_SIZE}s")  # payload length, index, term, MAC

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj stores log entries
# (view, record position) -> (length, index, term, payload start) or why the record is not whole and genuine
Reader = Callable[[memoryview, int], "tuple[int, int, int, int] | str"]


class JournalFormatError(ValueError):
    """The file is not a journal this version can read; nothing was changed."""


class JournalDamaged(JournalFormatError, DamagedAtRest):
    """Records that were durable no longer check out: damage at rest, not a crash's
    torn tail. The file is left as found; the node must be rebuilt from its peers."""


def record_key(raft_password: str) -> bytes:
    """The journal's MAC key, derived from the cluster's Raft password (which every
    node already needs): a changed password makes the old journal unreadable."""
    return hmac.new(raft_password.encode(), b"raftpoint journal records v2", hashlib.sha256).digest()


def key_id(key: bytes) -> str:
    """Names a key without revealing it: stored with the term, so a node started with
    another password is told so instead of finding every record damaged."""
    return hmac.new(key, b"key id", hashlib.sha256).hexdigest()[:16]


def _mac(key: bytes, command: bytes | memoryview, index: int, term: int) -> bytes:
    mac = hmac.new(key, FIELDS.pack(len(command), index, term), hashlib.sha256)
    mac.update(command)
    return mac.digest()


def encode(key: bytes, command: bytes, index: int, term: int) -> bytes:
    return RECORD.pack(len(command), index, term, _mac(key, command, index, term)) + command


def encode_all(key: bytes, entries: list[Entry]) -> tuple[bytes, list[int]]:
    """A whole journal file holding `entries`, and each record's offset."""
    parts, offsets, pos = [MAGIC], [], len(MAGIC)
    for command, index, term in entries:
        record = encode(key, command, index, term)
        parts.append(record)
        offsets.append(pos)
        pos += len(record)
    return b"".join(parts), offsets


@dataclass
class Scan:
    """The valid prefix of a journal file. `offsets[i]` is where entry i's record
    starts; `end` is just past the last valid record; `problem` says why the scan
    stopped before the end of the data (None: it did not); `damaged`, that what
    stopped it was durable (see the module docstring)."""
    entries: list[Entry] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    end: int = len(MAGIC)
    problem: str | None = None
    damaged: bool = False


def old_format(data: bytes) -> str | None:
    """What older journal format `data` (the file's first bytes at least) is in; None: not an old one."""
    return next((name for magic, name in OLD_FORMATS.items() if data.startswith(magic)), None)


def scan(data: bytes, key: bytes, durable_index: int = 0) -> Scan:
    """Parse a whole journal file (MAGIC included).

    `durable_index`: the commit index the journal stored, which is never stored
    before the entries up to it are flushed; 0 when unknown."""
    magic = bytes(data[:len(MAGIC)])
    if magic != MAGIC:
        raise JournalFormatError(f"not a raftpoint journal (starts with {magic!r})")
    return scan_with(data, lambda view, pos: _read_record(view, pos, key), durable_index)


def scan_with(data: bytes, read: Reader, durable_index: int) -> Scan:
    """The valid prefix of `data` (behind an 8-byte magic), each record read by `read`."""
    view = memoryview(data)
    result = Scan()
    pos = len(MAGIC)
    while pos < len(data):
        record = read(view, pos)
        previous = result.entries[-1] if result.entries else None
        if isinstance(record, tuple) and previous is not None and (
                record[1] != previous[1] + 1 or record[2] < previous[2]):
            record = f"record (index {record[1]}, term {record[2]}) does not follow " \
                     f"(index {previous[1]}, term {previous[2]})"
        if isinstance(record, str):
            result.problem = f"{record} at byte {pos}; {len(data) - pos} bytes dropped"
            result.damaged = _lost_durable(view, pos, read, previous, durable_index)
            break
        length, index, term, start = record
        result.entries.append((bytes(view[start:start + length]), index, term))
        result.offsets.append(pos)
        pos = start + length
    result.end = pos
    return result


def first_index(path: str) -> int | None:
    """The log index of the journal's first record, from its header alone (None: no
    record, or no journal); whether the record checks out is the journal's to say."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + RECORD.size)
    except FileNotFoundError:
        return None
    body = memoryview(head)[len(MAGIC):]
    if head.startswith(MAGIC) and len(body) >= RECORD.size:
        return RECORD.unpack_from(body)[1]
    return None


def _lost_durable(view: memoryview, pos: int, read: Reader, previous: Entry | None, durable_index: int) -> bool:
    """Whether the record that failed at `pos` held an entry at or below `durable_index`.

    After a good entry, the failed one was that entry's successor. With none (the
    first record failed) it is told by the next genuine record further on."""
    if durable_index <= 0:
        return False
    if previous is not None:
        return previous[1] + 1 <= durable_index
    for later in range(pos + 1, len(view)):
        record = read(view, later)
        if isinstance(record, tuple):
            return record[1] - 1 <= durable_index
    return False


def whole(view: memoryview, pos: int, header: struct.Struct) -> tuple[tuple, int] | str:
    """The header's fields (the payload length first) and where the payload starts,
    or why the record at `pos` is not whole."""
    if len(view) - pos < header.size:
        return "torn record header"
    fields, start = header.unpack_from(view, pos), pos + header.size
    if fields[0] > len(view) - start:
        return f"record of {fields[0]} bytes runs past the end of the file"
    return fields, start


def _read_record(view: memoryview, pos: int, key: bytes) -> tuple[int, int, int, int] | str:
    record = whole(view, pos, RECORD)
    if isinstance(record, str):
        return record
    (length, index, term, mac), start = record
    if not hmac.compare_digest(mac, _mac(key, view[start:start + length], index, term)):
        return "record fails authentication (damaged, or written with another Raft password)"
    return length, index, term, start
