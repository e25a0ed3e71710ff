"""A backup file (`raftpoint snapshot save`): a node's snapshot file, then a trailer.

The snapshot comes first and unchanged, so snapshot_file reads a backup as it reads
a snapshot. The trailer says what the snapshot holds and its SHA-256: a backup is
checked without the Raft password of the cluster it came from (its snapshot's MAC is
keyed by that password, which a restore into a new cluster does not use).

Layout: snapshot (size bytes) | trailer JSON | struct TRAILER_LEN (its length) | MAGIC.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from coordinator import fsutil

MAGIC = b"RPBACKUP"
TRAILER_LEN = struct.Struct(">I")
MAX_TRAILER_BYTES = 1 << 16
_CHUNK = 1 << 20


class BackupFormatError(ValueError):
    """Not a backup file, or one whose bytes are not those that were saved."""


@dataclass(frozen=True)
class BackupInfo:
    applied_index: int  # the state's applied index
    last_index: int  # the Raft index and term of the last entry the snapshot covers
    last_term: int
    size: int  # the snapshot's bytes, at the start of the file
    sha256: str  # of those bytes, hex
    node: str  # the Raft address of the node that wrote the snapshot


def trailer(info: BackupInfo) -> bytes:
    doc = json.dumps(asdict(info), sort_keys=True).encode()
    return doc + TRAILER_LEN.pack(len(doc)) + MAGIC


def read_info(f: BinaryIO) -> BackupInfo:
    """The trailer of the backup open as `f`; BackupFormatError for anything else."""
    end = f.seek(0, os.SEEK_END)
    tail = len(MAGIC) + TRAILER_LEN.size
    if end < tail:
        raise BackupFormatError("not a raftpoint backup (too short)")
    f.seek(end - tail)
    raw = f.read(tail)
    if raw[TRAILER_LEN.size:] != MAGIC:
        raise BackupFormatError("not a raftpoint backup (no backup trailer at its end: "
                                "a file `raftpoint snapshot save` wrote, whole, is needed)")
    (length,) = TRAILER_LEN.unpack(raw[:TRAILER_LEN.size])
    if not 0 < length <= min(MAX_TRAILER_BYTES, end - tail):
        raise BackupFormatError(f"damaged backup: its trailer claims {length} bytes")
    f.seek(end - tail - length)
    try:
        doc = json.loads(f.read(length))
        info = BackupInfo(**{name: doc[name] for name in BackupInfo.__dataclass_fields__})
    except (ValueError, KeyError, TypeError) as exc:
        raise BackupFormatError(f"damaged backup: unreadable trailer ({exc})") from None
    if info.size != end - tail - length:
        raise BackupFormatError(f"damaged backup: {end - tail - length} bytes of snapshot, the trailer says "
                                f"{info.size} (truncated or appended to)")
    return info


def sha256_of(f: BinaryIO, size: int) -> str:
    """SHA-256 (hex) of the first `size` bytes of `f`."""
    digest = hashlib.sha256()
    f.seek(0)
    remaining = size
    while remaining > 0:
        chunk = f.read(min(_CHUNK, remaining))
        if not chunk:
            break
        digest.update(chunk)
        remaining -= len(chunk)
    return digest.hexdigest()


def open_checked(path: Path) -> tuple[BinaryIO, BackupInfo]:
    """The backup at `path`, open, once its snapshot matches the trailer's SHA-256.
    Raises BackupFormatError, or OSError when it cannot be read."""
    f = open(path, "rb")
    try:
        info = read_info(f)
        found = sha256_of(f, info.size)
        if found != info.sha256:
            raise BackupFormatError(f"damaged backup: its snapshot's SHA-256 is {found}, the trailer says "
                                    f"{info.sha256}")
        f.seek(0)
        return f, info
    except BaseException:
        f.close()
        raise


def keep(partial: Path, dest: Path, info: BackupInfo) -> None:
    """Append the trailer to the checked snapshot in `partial` and make it `dest`,
    durably; never over an existing file (FileExistsError: `partial` is left)."""
    with open(partial, "ab") as f:
        f.write(trailer(info))
        f.flush()
        fsutil.fsync_file(f.fileno())
    os.link(partial, dest)  # fails on an existing `dest`, where a rename would replace it
    partial.unlink()
    fsutil.fsync_dir(dest.parent)
