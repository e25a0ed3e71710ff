"""The node's Raft snapshots: writing one for pysyncobj, and opening one it received.

The file layout is snapshot_file's; this module adds what pysyncobj's serializer
and deserializer hooks need around it: the durability of a received file, the
member list check, and the SnapshotInfo the node reports in its status.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from pysyncobj.node import TCPNode

from coordinator import fsutil
from coordinator.replication import snapshot_file
from coordinator.replication.replica import ExportedSnapshot
from coordinator.storage.protocol import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotInfo:
    applied_index: int  # the store's applied index in the image
    at_monotonic: float  # when it was written or loaded, for the status' age
    size: int
    # The Raft index of its last entry: at or past applied_index, by the entries that
    # change no state (a new leader's no-op, a membership change) applied after it.
    last_log_index: int = 0

    @classmethod
    def of(cls, path: str, applied_index: int, last_log_index: int = 0) -> SnapshotInfo:
        return cls(applied_index, time.monotonic(), os.path.getsize(path), last_log_index)


def existing(path: str) -> SnapshotInfo | None:
    """The snapshot a restarted node finds in place, if it is readable."""
    try:
        with open(path, "rb") as f:
            header = snapshot_file.read_header(f)
    except (OSError, snapshot_file.SnapshotFormatError):
        return None
    try:
        last_index = last_entry(path)[0]
    except snapshot_file.SnapshotFormatError:
        last_index = 0  # as before any snapshot: the journal says where the log starts
    return SnapshotInfo.of(path, header.applied_index, last_index)


def last_entry(path: str) -> tuple[int, int]:
    """(index, term) of the last log entry a snapshot file covers, from its raft data
    alone (unverified: enough to tell a stale snapshot, which is then discarded; one
    that is installed is verified by open_received). SnapshotFormatError (a
    ValueError) saying why when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return _last_entry_of(f)[1:]
    except snapshot_file.SnapshotFormatError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise snapshot_file.SnapshotFormatError(f"its raft data cannot be read ({exc})") from exc


def _last_entry_of(f: BinaryIO) -> tuple[snapshot_file.SnapshotHeader, int, int]:
    """(header, index, term of the last entry) of the snapshot open as `f`, from its start."""
    header = snapshot_file.read_header(f)
    last, _previous, _members = snapshot_file.decode_raft_data(f.read(header.raft_len), TCPNode)
    return header, last[1], last[2]


def open_covering(path: str, raft_index: int) -> ExportedSnapshot | None:
    """The snapshot at `path`, open, when it covers the log up to `raft_index`; None when
    there is none or it ends before. The open file stays what it was when a newer
    snapshot is renamed over it, so a reader sees one snapshot whole."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    try:
        header, index, term = _last_entry_of(f)
        if index < raft_index:
            f.close()
            return None
        f.seek(0)
        return ExportedSnapshot(f, header.applied_index, index, term, header.image_offset + header.image_len)
    except BaseException:
        f.close()
        raise


def write(path: str, raft_data: tuple, store: Store, key: bytes) -> SnapshotInfo:
    """Write and fsync a snapshot of `store` (the caller has committed what it applied).
    `key`: journal_format.record_key of the Raft password, for the file's MAC."""
    raft_json = snapshot_file.encode_raft_data(raft_data)
    snapshot_file.write(path, store.applied_index, raft_json, store.write_image, key)
    return SnapshotInfo.of(path, store.applied_index)


@dataclass(frozen=True)
class Received:
    header: snapshot_file.SnapshotHeader
    raft_data: tuple  # (last entry, previous entry, members) as pysyncobj wants them back
    image: BinaryIO  # positioned at the store image (header.image_len bytes)


@contextmanager
def open_received(path: str, raft_address: str, key: bytes) -> Iterator[Received]:
    """Open a snapshot pysyncobj is about to adopt, made durable first: it was renamed
    into place unsynced, and pysyncobj clears the journal once the deserializer returns.
    Raises SnapshotDamaged, before anything is decoded, for a file that fails its MAC."""
    with open(path, "rb") as f:
        fsutil.fsync_file(f.fileno())
        fsutil.fsync_dir(Path(path).parent)
        header = snapshot_file.read_header(f)
        snapshot_file.verify(f, header, key)
        raft_data = snapshot_file.decode_raft_data(f.read(header.raft_len), TCPNode)
        _warn_unless_member(raft_data, raft_address)
        yield Received(header, raft_data, f)


def _warn_unless_member(raft_data: tuple, raft_address: str) -> None:
    members = sorted(str(node) for node in raft_data[2])
    if raft_address not in members:
        # pysyncobj adopts this list as the membership: if the peers know this
        # node by another address, it now counts itself twice and loses a peer.
        log.warning("snapshot member list %s does not name this node %s: every node must name "
                    "each node by the address that node binds, or it was removed", members, raft_address)
