"""Our Raft snapshot file: header, pysyncobj's raft data, and a store image.

pysyncobj hands the serializer the last two applied log entries and the cluster
membership; we encode them as JSON (never pickle) and append a self-contained
image of the store at the same applied index, so one file restores a node.

Layout: MAGIC | struct HEADER (version, applied_index, raft_len, image_len) |
MAC (version 2 only) | raft JSON (raft_len bytes) | store image (image_len bytes).

The MAC (HMAC-SHA256 keyed like the journal's records, from the Raft password)
covers the header and everything after it. A snapshot is the one thing a node
adopts wholesale -- it replaces the store -- so the file is checked when it is
written (read back), when it is received and when it is installed at a start:
a damaged or hand-edited file is refused instead of becoming a replica's state
(and then, through its snapshots, another's). Version 1 files, written before
the MAC, are read only by `raftpoint migrate`, which rewrites them in this version
(`upgrade`): nothing else adopts a file nobody can vouch for.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator

from coordinator import fsutil
from coordinator.storage.protocol import DamagedAtRest

MAGIC = b"RPSNAP\x00\x01"
HEADER = struct.Struct(">IQQQ")
VERSION = 2
OLD_VERSION = 1  # no MAC: read only by `raftpoint migrate` (upgrade)
MAC_SIZE = 32
_CHUNK = 1 << 20


class SnapshotFormatError(ValueError):
    pass


class SnapshotDamaged(SnapshotFormatError, DamagedAtRest):
    """The file does not match its MAC: damaged on disk or in transit, or edited."""


class OldSnapshot(SnapshotFormatError):
    """A version 1 file: it carries no MAC, so it is not read (`raftpoint migrate` converts it)."""


@dataclass(frozen=True)
class SnapshotHeader:
    applied_index: int
    raft_len: int
    image_len: int
    mac: bytes | None = None  # None: a version 1 file (OLD_VERSION)

    @property
    def raft_offset(self) -> int:
        return len(MAGIC) + HEADER.size + (0 if self.mac is None else MAC_SIZE)

    @property
    def image_offset(self) -> int:
        return self.raft_offset + self.raft_len


def encode_raft_data(raft_data: Any) -> bytes:
    """(last entry, previous entry, cluster nodes) -> JSON; entries are (bytes, index, term)."""
    last, previous, cluster = raft_data
    entries = [[base64.b64encode(e[0]).decode(), e[1], e[2]] for e in (last, previous)]
    nodes = sorted(getattr(n, "address", getattr(n, "id", str(n))) for n in cluster)
    return json.dumps({"entries": entries, "cluster": nodes}, sort_keys=True).encode()


def decode_raft_data(data: bytes, node_factory: Callable[[str], Any]) -> tuple:
    doc = json.loads(data)
    last, previous = ((base64.b64decode(e[0]), int(e[1]), int(e[2])) for e in doc["entries"])
    return last, previous, {node_factory(a) for a in doc["cluster"]}


def write(path: str, applied_index: int, raft_json: bytes, write_image: Callable[[BinaryIO], int],
          key: bytes) -> None:
    """Write, MAC, verify and fsync the whole file; the caller's rename makes it visible."""
    with open(path, "w+b") as f:
        f.write(MAGIC + HEADER.pack(VERSION, applied_index, len(raft_json), 0) + bytes(MAC_SIZE) + raft_json)
        f.flush()
        image_len = write_image(f)
        f.flush()
        header = SnapshotHeader(applied_index, len(raft_json), image_len, bytes(MAC_SIZE))
        mac = _mac(f, header, key)
        f.seek(len(MAGIC))
        f.write(HEADER.pack(VERSION, applied_index, len(raft_json), image_len) + mac)
        f.flush()
        fsutil.fsync_file(f.fileno())
        f.seek(0)
        verify(f, read_header(f), key)  # what the disk gives back, not what we meant to write


def read_header(f: BinaryIO) -> SnapshotHeader:
    """The header; leaves `f` at the raft JSON. OldSnapshot for a version 1 file."""
    header = _read_any_header(f)
    if header.mac is None:
        raise OldSnapshot(f"snapshot at applied index {header.applied_index} is of version {OLD_VERSION}, which "
                          "carries no MAC: it is not read (`raftpoint migrate` converts it)")
    return header


def old_header(f: BinaryIO) -> SnapshotHeader | None:
    """The header of a version 1 file, leaving `f` at its raft JSON; None for a file of
    this version. For `raftpoint migrate` only: nothing vouches for what follows."""
    header = _read_any_header(f)
    return header if header.mac is None else None


def _read_any_header(f: BinaryIO) -> SnapshotHeader:
    magic = f.read(len(MAGIC))
    if magic != MAGIC:
        raise SnapshotFormatError(f"not a raftpoint snapshot (magic {magic!r})")
    raw = f.read(HEADER.size)
    if len(raw) != HEADER.size:
        raise SnapshotFormatError("truncated snapshot header")
    version, applied, raft_len, image_len = HEADER.unpack(raw)
    if version == OLD_VERSION:
        return SnapshotHeader(applied, raft_len, image_len)
    if version != VERSION:
        raise SnapshotFormatError(f"unsupported snapshot version {version}")
    mac = f.read(MAC_SIZE)
    if len(mac) != MAC_SIZE:
        raise SnapshotFormatError("truncated snapshot header")
    return SnapshotHeader(applied, raft_len, image_len, mac)


def verify(f: BinaryIO, header: SnapshotHeader, key: bytes) -> None:
    """Raise SnapshotDamaged unless the file matches its MAC; leaves `f` at the raft JSON."""
    if header.mac is None or not hmac.compare_digest(header.mac, _mac(f, header, key)):
        raise SnapshotDamaged(f"snapshot at applied index {header.applied_index} does not match its MAC: "
                              "damaged on disk or in transit, or written with another Raft password")
    f.seek(header.raft_offset)


def upgrade(f: BinaryIO, header: SnapshotHeader, raft_json: bytes, path: str, key: bytes) -> None:
    """Write the version 1 file open as `f` (its header and raft JSON read) to `path` in
    this version, MAC included; the caller's rename makes it visible."""
    write(path, header.applied_index, raft_json, image_of(f, header), key)


def image_of(f: BinaryIO, header: SnapshotHeader) -> Callable[[BinaryIO], int]:
    """A `write_image` for `write` that copies the store image of the snapshot open as `f`."""
    def copy_image(out: BinaryIO) -> int:
        f.seek(header.image_offset)
        for chunk in _chunks(f, header, header.image_len):
            out.write(chunk)
        return header.image_len
    return copy_image


def _mac(f: BinaryIO, header: SnapshotHeader, key: bytes) -> bytes:
    """Over the header's fields and the raft JSON and image as they are in the file."""
    mac = hmac.new(key, HEADER.pack(VERSION, header.applied_index, header.raft_len, header.image_len),
                   hashlib.sha256)
    f.seek(header.raft_offset)
    for chunk in _chunks(f, header, header.raft_len + header.image_len):
        mac.update(chunk)
    return mac.digest()


def _chunks(f: BinaryIO, header: SnapshotHeader, count: int) -> Iterator[bytes]:
    """The next `count` bytes of `f`, in chunks; SnapshotDamaged when the file ends first."""
    remaining = count
    while remaining > 0:
        chunk = f.read(min(_CHUNK, remaining))
        if not chunk:
            raise SnapshotDamaged(f"snapshot at applied index {header.applied_index} is truncated: "
                                  f"{remaining} bytes missing")
        yield chunk
        remaining -= len(chunk)
