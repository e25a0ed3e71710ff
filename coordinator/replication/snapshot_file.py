"""Our Raft snapshot file: header, pysyncobj's raft data, and a store image.

pysyncobj hands the serializer the last two applied log entries and the cluster
membership; we encode them as JSON (never pickle) and append a self-contained
image of the store at the same applied index, so one file restores a node.

Layout: MAGIC | struct HEADER (version, applied_index, raft_len, image_len) |
raft JSON (raft_len bytes) | store image (image_len bytes).
"""
from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

from coordinator import fsutil

MAGIC = b"RPSNAP\x00\x01"
HEADER = struct.Struct(">IQQQ")
VERSION = 1


class SnapshotFormatError(ValueError):
    pass


@dataclass(frozen=True)
class SnapshotHeader:
    applied_index: int
    raft_len: int
    image_len: int

    @property
    def image_offset(self) -> int:
        return len(MAGIC) + HEADER.size + self.raft_len


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


def write(path: str, applied_index: int, raft_json: bytes, write_image: Callable[[BinaryIO], int]) -> None:
    """Write and fsync the whole file; the caller's rename makes it visible."""
    with open(path, "wb") as f:
        f.write(MAGIC + HEADER.pack(VERSION, applied_index, len(raft_json), 0) + raft_json)
        f.flush()
        image_len = write_image(f)
        f.flush()
        f.seek(len(MAGIC))
        f.write(HEADER.pack(VERSION, applied_index, len(raft_json), image_len))
        f.flush()
        fsutil.fsync_file(f.fileno())


def read_header(f: BinaryIO) -> SnapshotHeader:
    magic = f.read(len(MAGIC))
    if magic != MAGIC:
        raise SnapshotFormatError(f"not a raftpoint snapshot (magic {magic!r})")
    raw = f.read(HEADER.size)
    if len(raw) != HEADER.size:
        raise SnapshotFormatError("truncated snapshot header")
    version, applied, raft_len, image_len = HEADER.unpack(raw)
    if version != VERSION:
        raise SnapshotFormatError(f"unsupported snapshot version {version}")
    return SnapshotHeader(applied, raft_len, image_len)
