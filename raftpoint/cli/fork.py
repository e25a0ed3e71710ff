"""`raftpoint restore G --savepoint S --into NEW --blob-store DIR|URL [--dry-run]`: a
savepoint restored into a new group beside the original, which goes on running.

The fork's checkpoints read from copies of the savepoint's manifests made in the blob
store given (chunks are shared), so garbage collection of either group never takes
the other's state. Its agents resume from them when they register into NEW."""
from __future__ import annotations

import argparse
import sys

from agent_client import group_fork
from agent_client.blobs.errors import BlobError
from agent_client.blobs.location import open_blob_store
from agent_client.connection import CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.data_uris import shown_uri
from raftpoint.cli import target
from raftpoint.cli.gc import list_uris
from raftpoint.cli.output import plain, print_json, print_table

PROG = "raftpoint restore --into"


def refusal(args: argparse.Namespace) -> str | None:
    """Why these flags make no fork (None: they do)."""
    if args.into and not args.savepoint:
        return "--into forks a savepoint: give --savepoint NAME (not --containing)"
    if args.into and not args.blob_store:
        return ("--into needs --blob-store DIR|URL, the store holding the savepoint's checkpoints: the fork reads "
                "from copies of their manifests made there")
    if args.blob_store and not args.into:
        return "--blob-store is for a fork: give --into NEW, or leave it out to restore in place"
    return None


def _rows(members: list[str], checkpoints: list[pb.CheckpointMeta]) -> list[tuple[object, ...]]:
    by_agent = {cp.agent_id: cp for cp in checkpoints}
    return [(agent, by_agent[agent].index, shown_uri(by_agent[agent].blob_uri)) if agent in by_agent
            else (agent, "initial state", "-") for agent in members]


def run(args: argparse.Namespace) -> int:
    try:  # settings that name no usable store or cluster
        store = open_blob_store(args.blob_store)
        where = target.resolve(args)
    except (OSError, ValueError, ImportError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        with where.connection(deadline=30, rpc_timeout=35) as conn:
            if args.dry_run:
                held = group_fork.held_in_store(conn, store, args.group, args.savepoint)
                print(f"dry run: forking group {args.group} at savepoint {args.savepoint} into {args.into} would "
                      "copy these checkpoints' manifests (nothing was changed; the name is checked by the fork):")
                print_table(("AGENT", "CHECKPOINT", "BLOB"), [(m.agent_id, m.index, shown_uri(m.blob_uri)) for m in held])
                return 0
            answer = group_fork.fork(conn, store, args.group, args.savepoint, args.into)
    except group_fork.OutcomeUnknown as exc:
        print(f"{PROG}: {exc}; the fork may exist: check with raftpoint group show {args.into}; if it does not, "
              f"delete its copies with raftpoint gc --blob-store {args.blob_store} and:", file=sys.stderr)
        list_uris(exc.uris)
        return 1
    except (Rejected, CoordinatorUnavailable, BlobError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json(plain(answer))
        return 0
    print(f"group {args.into} forked from group {args.group} at savepoint {args.savepoint}; each agent resumes "
          f"from its checkpoint when it registers into {args.into}:")
    print_table(("AGENT", "CHECKPOINT", "BLOB"), _rows(list(answer.group.members),
                                                       list(answer.checkpoints)))
    return 0
