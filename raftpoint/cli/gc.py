"""`raftpoint gc --blob-store URL --group G`: delete the blobs of checkpoints the
coordinator no longer needs, and the chunks nothing references any more.

Only the checkpoints held in the given store are released: a group whose agents (or
LangGraph savers) write to several stores is collected by one run per store."""
from __future__ import annotations

import argparse
import sys

from agent_client import blob_gc
from agent_client.blobs.errors import BlobError
from agent_client.blobs.gc import DEFAULT_GRACE_S, GcResult
from agent_client.blobs.location import open_blob_store
from agent_client.blobs.store import LocalBlobStore
from agent_client.connection import CoordinatorUnavailable, Rejected
from raftpoint.cli import target

PROG = "raftpoint gc"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gc", help="delete released checkpoints' blobs and unreferenced chunks",
                            description=__doc__.splitlines()[0])
    parser.add_argument("--blob-store", required=True,
                        help="a directory, file:// or s3://bucket/prefix?endpoint=...&region=... "
                             "(credentials from AWS_* variables or the shared credentials file)")
    parser.add_argument("--group", action="append", default=[],
                        help="ask the coordinator to release this group's old checkpoints held in this blob "
                             "store; those in other stores stay for a run against them (repeatable)")
    parser.add_argument("--uri", action="append", default=[],
                        help="delete this released checkpoint's manifest, without asking the coordinator "
                             "(repeatable; for URIs an earlier gc printed but could not delete)")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                        help="never delete a pack or chunk younger than this: a checkpoint may be being written "
                             f"(default {DEFAULT_GRACE_S:.0f})")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def _say_result(result: GcResult) -> None:
    print(f"deleted {result.manifests_removed} manifests, {result.packs_removed} packs and "
          f"{result.chunks_removed} single-chunk objects ({result.bytes_freed} bytes)")


def list_uris(uris: list[str]) -> None:
    """Released checkpoints still stored, as the flags that delete them (`gc --uri`):
    the coordinator has forgotten them, so this list is the only record left."""
    for uri in uris:
        print(f"  --uri {uri}", file=sys.stderr)


def say_not_deleted(prog: str, exc: blob_gc.ReleasedButNotDeleted) -> int:
    print(f"{prog}: {exc}", file=sys.stderr)
    list_uris(exc.uris)
    return 1


def say_report(prog: str, report: blob_gc.GcReport, store: LocalBlobStore) -> int:
    """What a collection released and deleted; 1 when some released checkpoints are in
    another store (listed, to delete there)."""
    for group, uris in report.released.items():
        print(f"group {group}: the coordinator released {len(uris)} checkpoints stored as blobs (those held "
              "inline went with their records)")
    _say_result(report.result)
    if report.foreign:
        print(f"{prog}: {len(report.foreign)} released checkpoints are not in {store.backend.location}; "
              "delete them with gc --uri against their store:", file=sys.stderr)
        list_uris(report.foreign)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    if args.grace < 0:
        print(f"{PROG}: --grace must not be negative", file=sys.stderr)
        return 2
    try:
        store = open_blob_store(args.blob_store)
    except (ValueError, ImportError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        if not args.group:
            _say_result(store.delete_checkpoints(args.uri, grace_s=args.grace))
            return 0
        where = target.resolve(args)
        with where.connection() as conn:
            report = blob_gc.collect(conn, store, args.group, grace_s=args.grace)
        if args.uri:
            _say_result(store.delete_checkpoints(args.uri, grace_s=args.grace))
    except blob_gc.ReleasedButNotDeleted as exc:
        return say_not_deleted(PROG, exc)
    except (BlobError, CoordinatorUnavailable, Rejected, OSError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return say_report(PROG, report, store)
