"""`raftpoint snapshot save FILE` and `raftpoint snapshot restore FILE --data-dir D --members ...`.

save: a consistent copy of the cluster's state from its leader (AdminService.SaveSnapshot,
admin role), checked against the SHA-256 the node sent before it is kept, and written
to FILE only whole (never over an existing file). restore: seeds an empty data dir of
a new cluster from it (coordinator/replication/restore.py says why a new Raft password
and the new members are needed).
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Iterator

from agent_client.connection import CoordinatorUnavailable, Rejected
from coordinator import config
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLSError
from coordinator.config import ConfigError
from coordinator.replication import backup_file, restore
from coordinator.replication.backup_file import BackupFormatError, BackupInfo
from coordinator.replication.snapshot_file import SnapshotFormatError
from raftpoint.cli import target

PROG = "raftpoint snapshot"
DEFAULT_TIMEOUT_S = 600.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("snapshot", help="save the cluster's state to a file; restore a new cluster from one",
                            description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    save = actions.add_parser("save", help="save a consistent copy of the cluster's state (admin role)")
    save.add_argument("file", type=Path, help="where to write it (must not exist)")
    save.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                      help=f"for the whole transfer (default {DEFAULT_TIMEOUT_S:.0f})")
    target.add_arguments(save)
    save.set_defaults(func=run_save)
    restore_parser = actions.add_parser(
        "restore", help="seed a new cluster's node from a saved file (each node's empty data dir in turn)",
        description="Write a new node's snapshot and term file from FILE into an empty data dir. Run it for "
                    "every node of the new cluster with the same --members, then start them. The new cluster "
                    "needs a Raft password other than the old one's.")
    restore_parser.add_argument("file", type=Path, help="a file `raftpoint snapshot save` wrote")
    restore_parser.add_argument("--data-dir", type=Path, required=True, help="the new node's data dir (empty)")
    restore_parser.add_argument("--members", required=True,
                                help="comma-separated Raft addresses of every node of the new cluster, this one "
                                     "included (as each node binds it)")
    config.add_password_flags(restore_parser)
    restore_parser.set_defaults(func=run_restore)


def receive(items: Iterator[pb.SaveSnapshotResponse], partial: Path) -> BackupInfo:
    """Write a SaveSnapshot stream's file to `partial`; its description once the bytes
    match the size and SHA-256 the node sent (BackupFormatError otherwise)."""
    saved: pb.SavedSnapshot | None = None
    digest, size = hashlib.sha256(), 0
    with open(partial, "wb") as f:
        for item in items:
            part = item.WhichOneof("part")
            if saved is None and part != "saved":
                raise BackupFormatError(f"the node's answer began with {part!r}, not the snapshot's description")
            if part == "saved":
                saved = item.saved
            elif part == "chunk":
                digest.update(item.chunk)
                size += len(item.chunk)
                f.write(item.chunk)
            elif part == "sha256":
                if size != saved.size or item.sha256 != digest.hexdigest():
                    raise BackupFormatError(f"the snapshot arrived damaged: {size} bytes of SHA-256 "
                                            f"{digest.hexdigest()}, the node sent {saved.size} of {item.sha256}")
                return BackupInfo(applied_index=saved.applied_index, last_index=saved.last_index,
                                  last_term=saved.last_term, size=size, sha256=item.sha256, node=saved.node)
    raise BackupFormatError(f"the snapshot stream ended after {size} bytes, before its SHA-256")


def run_save(args: argparse.Namespace) -> int:
    dest: Path = args.file
    if dest.exists():
        print(f"{PROG}: {dest} exists: give a new file name", file=sys.stderr)
        return 2
    if not dest.parent.is_dir():
        print(f"{PROG}: {dest.parent} is not a directory", file=sys.stderr)
        return 2
    try:
        where = target.resolve(args)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    partial = dest.with_name(dest.name + ".partial")
    try:
        with where.connection(deadline=60) as conn:
            info = conn.fetch("AdminService", "SaveSnapshot", pb.SaveSnapshotRequest(),
                              lambda items: receive(items, partial), timeout=args.timeout)
        backup_file.keep(partial, dest, info)
    except (CoordinatorUnavailable, Rejected, ClientTLSError, BackupFormatError, OSError) as exc:
        partial.unlink(missing_ok=True)
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(f"saved {dest}: the state at Raft index {info.last_index} (term {info.last_term}, applied index "
          f"{info.applied_index}) from {info.node}, {info.size} bytes, sha256 {info.sha256}")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    try:
        password = config.password_from_args(args)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    members = [m.strip() for m in args.members.split(",") if m.strip()]
    try:
        done = restore.restore(args.file, args.data_dir, members, password)
    except restore.RestoreRefused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except (BackupFormatError, SnapshotFormatError, OSError) as exc:
        print(f"{PROG}: {args.file}: {exc}", file=sys.stderr)
        return 1
    print(f"restored {args.data_dir} to Raft index {done.info.last_index} (applied index "
          f"{done.info.applied_index}) as a node of {', '.join(done.members)}; restore every member's data dir "
          "alike, then start the nodes with the new Raft password")
    return 0
