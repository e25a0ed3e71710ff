"""`raftpoint gc --blob-store URL --group G`: delete the blobs of checkpoints the
coordinator no longer needs, and the chunks nothing references any more."""
from __future__ import annotations

import argparse
import sys

from agent_client import blob_gc
from agent_client.blobs.errors import BlobError
from agent_client.blobs.gc import DEFAULT_GRACE_S, GcResult
from agent_client.blobs.location import open_blob_store
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from raftpoint.cli import target


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gc", help="delete released checkpoints' blobs and unreferenced chunks",
                            description=__doc__.splitlines()[0])
    parser.add_argument("--blob-store", required=True,
                        help="a directory, file:// or s3://bucket/prefix?endpoint=...&region=... "
                             "(credentials from AWS_* variables or the shared credentials file)")
    parser.add_argument("--group", action="append", default=[],
                        help="ask the coordinator to release this group's old checkpoints (repeatable)")
    parser.add_argument("--uri", action="append", default=[],
                        help="delete this released checkpoint's manifest, without asking the coordinator "
                             "(repeatable; for URIs an earlier gc printed but could not delete)")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                        help="never delete a chunk younger than this: a checkpoint may be being written "
                             f"(default {DEFAULT_GRACE_S:.0f})")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def _say_result(result: GcResult) -> None:
    print(f"deleted {result.manifests_removed} manifests and {result.chunks_removed} chunks "
          f"({result.bytes_freed} bytes)")


def run(args: argparse.Namespace) -> int:
    if args.grace < 0:
        print("raftpoint gc: --grace must not be negative", file=sys.stderr)
        return 2
    try:
        store = open_blob_store(args.blob_store)
    except (ValueError, ImportError) as exc:
        print(f"raftpoint gc: {exc}", file=sys.stderr)
        return 2
    try:
        if not args.group:
            _say_result(store.delete_checkpoints(args.uri, grace_s=args.grace))
            return 0
        where = target.resolve(args)
        with Connection(where.endpoints, token=where.token, tls=where.tls) as conn:
            report = blob_gc.collect(conn, store, args.group, grace_s=args.grace)
        if args.uri:
            _say_result(store.delete_checkpoints(args.uri, grace_s=args.grace))
    except blob_gc.ReleasedButNotDeleted as exc:
        print(f"raftpoint gc: {exc}", file=sys.stderr)
        for uri in exc.uris:
            print(f"  --uri {uri}", file=sys.stderr)
        return 1
    except (BlobError, CoordinatorUnavailable, Rejected, OSError, ValueError) as exc:
        print(f"raftpoint gc: {exc}", file=sys.stderr)
        return 1
    for group, uris in report.released.items():
        print(f"group {group}: the coordinator released {len(uris)} checkpoints")
    _say_result(report.result)
    if report.foreign:
        print(f"raftpoint gc: {len(report.foreign)} released checkpoints are not in {store.backend.location}; "
              "delete them with gc --uri against their store:", file=sys.stderr)
        for uri in report.foreign:
            print(f"  --uri {uri}", file=sys.stderr)
        return 1
    return 0
