"""Seeding a new cluster's data dirs from a backup (`raftpoint snapshot restore`).

Each node of the new cluster gets, in its empty data dir, the backup's snapshot
rewritten for the new cluster, and a term file; on its first start the node loads the
snapshot as it loads its own (its store image, the log starting after the snapshot's
last entry) and the cluster elects a leader from there.

A restored node must never take part in its old cluster: its fresh term file holds
no vote, so as a member of the old cluster it could vote twice in a term, and its log
would be the backup's, older than what that cluster acknowledged since. Two rules
make that impossible rather than unlikely:
- the snapshot's member list, which a starting node adopts as the cluster, is the new
  cluster's (`members`), not the old one's;
- the new cluster's Raft password must differ from the old one's (checked against the
  old snapshot's MAC): the Raft port admits only peers that know the password, so old
  and new nodes cannot reach each other at all.
The term file starts at the snapshot's last term: a new leader's entries must carry
a later term than those the log already holds, or Raft's "more up to date log" vote
test would prefer a node lacking committed entries.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from coordinator import fsutil
from coordinator.core import ids
from coordinator.core.errors import Rejection
from coordinator.replication import backup_file, journal_format, snapshot_file
from coordinator.replication.backup_file import BackupInfo
from coordinator.replication.journal_file import write_term_file
from coordinator.storage.protocol import SNAPSHOT_FILE, TERM_FILE


PARTIAL_SNAPSHOT = SNAPSHOT_FILE + ".restoring"


class RestoreRefused(ValueError):
    """The restore would not be safe or cannot be done; nothing was written."""


@dataclass(frozen=True)
class Restored:
    info: BackupInfo
    members: tuple[str, ...]


def check_members(members: list[str]) -> tuple[str, ...]:
    """The new cluster's Raft addresses, each once; RestoreRefused for a bad one."""
    if not members:
        raise RestoreRefused("give the new cluster's members: the Raft address of every node, this one included")
    for address in members:
        try:
            ids.check_address(address, "member")
        except Rejection as r:
            raise RestoreRefused(str(r)) from None
    if len(set(members)) != len(members):
        raise RestoreRefused(f"a member is named twice: {', '.join(members)}")
    return tuple(members)


def restore(backup: Path, data_dir: Path, members: list[str], raft_password: str) -> Restored:
    """Write the new node's snapshot and term file into the empty (or missing) `data_dir`.
    Raises RestoreRefused, BackupFormatError (a damaged backup) or OSError."""
    new_members = check_members(members)
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        unfinished = data_dir.is_dir() and not (data_dir / SNAPSHOT_FILE).exists() and \
            {p.name for p in data_dir.iterdir()} <= {TERM_FILE, PARTIAL_SNAPSHOT}
        raise RestoreRefused(f"{data_dir} holds an unfinished restore: delete it and restore again" if unfinished
                             else f"{data_dir} is not an empty directory: a restore seeds a new node only, never "
                                  "one that holds a cluster's data")
    key = journal_format.record_key(raft_password)
    f, info = backup_file.open_checked(backup)
    with f:
        header = snapshot_file.read_header(f)
        last, previous, _old_members = snapshot_file.decode_raft_data(f.read(header.raft_len), str)
        if header.applied_index != info.applied_index or last[1:] != (info.last_index, info.last_term):
            raise backup_file.BackupFormatError("damaged backup: its snapshot and its trailer disagree")
        f.seek(0)
        header = snapshot_file.read_header(f)
        try:
            snapshot_file.verify(f, header, key)
        except snapshot_file.SnapshotDamaged:
            pass  # another password: what a new cluster needs
        else:
            raise RestoreRefused("the new cluster's Raft password is the one the backed-up cluster used: give the "
                                 "new cluster a new one, so that no node of the old cluster can reach it")
        fsutil.ensure_dir(data_dir)
        # The term file first: the snapshot, renamed into place last, marks a finished restore.
        write_term_file(data_dir / TERM_FILE, {"term": info.last_term, "voted_for": None,
                                                "key_id": journal_format.key_id(key)})
        partial = data_dir / PARTIAL_SNAPSHOT
        raft_json = snapshot_file.encode_raft_data((last, previous, new_members))
        snapshot_file.write(str(partial), header.applied_index, raft_json, snapshot_file.image_of(f, header), key)
    os.replace(partial, data_dir / SNAPSHOT_FILE)
    fsutil.fsync_dir(data_dir)
    return Restored(info, new_members)
