"""`raftpoint savepoint create|list|delete G [NAME]`: named consistent moments of a group.

A savepoint holds a coordinated group's last stable epoch, or the maximum consistent
cut of another group's stable checkpoints, as the coordinator found them when it was
created; garbage collection keeps those checkpoints (and their blobs) until the
savepoint is deleted."""
from __future__ import annotations

import argparse
import sys
import uuid

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target
from raftpoint.cli.output import add_json_flag, plain, print_json, print_table, utc

PROG = "raftpoint savepoint"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("savepoint", help="create, list or delete a group's savepoints",
                            description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="savepoint_command", required=True)
    create = actions.add_parser("create", help="name the group's newest consistent global checkpoint and keep it")
    create.add_argument("group")
    create.add_argument("name")
    create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="a note kept with it (repeatable)")
    create.set_defaults(func=run_create)
    listing = actions.add_parser("list", help="the group's savepoints, by name")
    listing.add_argument("group")
    listing.set_defaults(func=run_list)
    delete = actions.add_parser("delete", help="forget a savepoint: the next gc may take what only it kept")
    delete.add_argument("group")
    delete.add_argument("name")
    delete.set_defaults(func=run_delete)
    for action in (create, listing, delete):
        add_json_flag(action)
        target.add_arguments(action)


def held(savepoint: pb.Savepoint) -> str:
    """Its checkpoints as agent:index, by agent (index 0: the agent's initial state)."""
    return " ".join(f"{s.agent_id}:{s.index}" for s in savepoint.checkpoints)


def _say(savepoint: pb.Savepoint, done: str, as_json: bool) -> None:
    if as_json:
        print_json(plain(savepoint))
    else:
        print(f"{done} savepoint {savepoint.name} of group {savepoint.group}: {held(savepoint)}")


def labels(pairs: list[str]) -> dict[str, str]:
    """--label KEY=VALUE flags as a dict; ValueError naming the first without a '='."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--label {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def run_create(args: argparse.Namespace) -> int:
    prog = f"{PROG} create"
    try:
        request = pb.CreateSavepointRequest(request_id=f"savepoint-{uuid.uuid4().hex}", group=args.group,
                                            name=args.name, labels=labels(args.label))
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    answer, code = target.admin_call(args, prog, "CreateSavepoint", request)
    if code == 0:
        _say(answer.savepoint, "created", args.json)
    return code


def run_delete(args: argparse.Namespace) -> int:
    answer, code = target.admin_call(args, f"{PROG} delete", "DeleteSavepoint", pb.DeleteSavepointRequest(
        request_id=f"savepoint-{uuid.uuid4().hex}", group=args.group, name=args.name))
    if code == 0:
        _say(answer.savepoint, "deleted", args.json)
    return code


def run_list(args: argparse.Namespace) -> int:
    request = pb.ListSavepointsRequest(group=args.group)
    found, code = target.admin_calls(
        args, f"{PROG} list", lambda conn: target.every_page(conn, "ListSavepoints", request, "savepoints")[1])
    if code:
        return code
    if args.json:
        print_json([plain(s) for s in found])
        return 0
    print_table(("NAME", "CREATED", "EPOCH", "CHECKPOINTS", "LABELS"),
                [(s.name, utc(s.created_at), s.epoch or "-", held(s),
                  ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))) for s in found])
    return 0
