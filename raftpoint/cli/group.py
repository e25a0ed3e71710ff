"""`raftpoint group create NAME --mode MODE` and `raftpoint group delete NAME`: a group's
life on a running cluster, as its admin; `group list` and `group show NAME` read it
(raftpoint.cli.group_view); `group show NAME --svg FILE` draws it (raftpoint.cli.group_picture).

Creating is idempotent (the same spec again is answered with the group); an agent
identity bound to the group (`raftpoint auth add-agent`) may then use it but not
create it. Deleting is refused while an agent of the group is alive: one that
stopped without deregistering holds its lease for the group's lease TTL. The
coordinator then forgets the group and its checkpoints; their blobs are deleted
from --blob-store as `raftpoint gc` deletes released checkpoints, or listed to delete
later (nothing else remembers them).
"""
from __future__ import annotations

import argparse
import sys

from agent_client import blob_gc
from agent_client.blobs.errors import BlobError
from agent_client.blobs.gc import DEFAULT_GRACE_S
from agent_client.blobs.location import open_blob_store
from agent_client.connection import CoordinatorUnavailable, Rejected
from agent_client.group_spec import MODES, create_request
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLSError
from raftpoint.cli import gc, group_picture, group_view, target
from raftpoint.cli.output import add_json_flag

PROG = "raftpoint group"
IN_USE_HINT = (" (an agent that stopped without deregistering keeps its lease for the group's lease TTL: "
               "try again once it has run out)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("group", help="create, list, show or delete groups")
    actions = parser.add_subparsers(dest="group_command", required=True)
    create = actions.add_parser("create", help="create a group (the same spec again is fine)")
    create.add_argument("name")
    create.add_argument("--mode", required=True, choices=list(MODES), help="how its agents checkpoint")
    create.add_argument("--lease-ttl", type=float, default=None, metavar="SECONDS",
                        help="how long an agent that stops heartbeating stays alive (default 10)")
    target.add_arguments(create)
    create.set_defaults(func=run_create)
    delete = actions.add_parser("delete", help="delete a finished group (no live agents) and its checkpoints")
    delete.add_argument("name")
    delete.add_argument("--blob-store", help="delete its checkpoints' blobs there too (a directory, file:// "
                                             "or s3://...; else they are listed)")
    delete.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                        help="as for raftpoint gc: never delete a chunk younger than this")
    target.add_arguments(delete)
    delete.set_defaults(func=run_delete)
    listing = actions.add_parser("list", help="every group: mode, state, stable epoch, members")
    show = actions.add_parser("show", help="a group's agents, their states and latest checkpoints, and its "
                                           "current recovery line (where every agent would roll back if all failed)")
    show.add_argument("name")
    group_picture.add_flags(show)
    for reader, run in ((listing, group_view.run_list), (show, run_show)):
        add_json_flag(reader)
        target.add_arguments(reader)
        reader.set_defaults(func=run)


def run_show(args: argparse.Namespace) -> int:
    return group_picture.run(args) if group_picture.wanted(args) else group_view.run_show(args)


def run_create(args: argparse.Namespace) -> int:
    try:
        where = target.resolve(args)
        request = create_request(args.name, args.mode, lease_ttl_s=args.lease_ttl)
    except (OSError, ValueError) as exc:
        print(f"{PROG} create: {exc}", file=sys.stderr)
        return 2
    try:
        with where.connection() as conn:
            spec = conn.call("AdminService", "CreateGroup", request).group.spec
    except (CoordinatorUnavailable, Rejected, ClientTLSError) as exc:
        print(f"{PROG} create: {exc}", file=sys.stderr)
        return 1
    mode = next(name for name, value in MODES.items() if value == spec.mode)
    print(f"group {spec.group}: mode {mode}, lease TTL {spec.lease_ttl_s:g}s")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    prog = f"{PROG} delete"
    if args.grace < 0:
        print(f"{prog}: --grace must not be negative", file=sys.stderr)
        return 2
    try:
        where = target.resolve(args)
        store = open_blob_store(args.blob_store) if args.blob_store else None
    except (OSError, ValueError, ImportError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        with where.connection() as conn:
            if store is not None:
                report = blob_gc.delete_released(store, lambda: {args.name: blob_gc.delete_group(conn, args.name)},
                                                 args.grace)
            else:
                uris = blob_gc.delete_group(conn, args.name)
    except blob_gc.ReleasedButNotDeleted as exc:
        return gc.say_not_deleted(prog, exc)
    except (BlobError, CoordinatorUnavailable, Rejected, ClientTLSError, OSError) as exc:
        in_use = isinstance(exc, Rejected) and exc.reason_code == pb.REASON_GROUP_IN_USE
        print(f"{prog}: {exc}{IN_USE_HINT if in_use else ''}", file=sys.stderr)
        return 1
    print(f"deleted group {args.name}")
    if store is not None:
        return gc.say_report(prog, report, store)
    if uris:
        print(f"{prog}: the blobs of its {len(uris)} checkpoints are still stored: delete them with "
              "`raftpoint gc --blob-store <its blob store>` and", file=sys.stderr)
        gc.list_uris(uris)
    return 0
