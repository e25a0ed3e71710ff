"""`raftpoint checkpoints G [--agent A]`: the checkpoints the coordinator holds for a
group's members (or one agent), oldest first, each marked stable or not."""
from __future__ import annotations

import argparse

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.data_uris import shown_uri
from raftpoint.cli import target
from raftpoint.cli.output import add_json_flag, enum_word, plain, print_json, print_table, utc

PROG = "raftpoint checkpoints"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("checkpoints", help="list a group's checkpoints", description=__doc__.splitlines()[0])
    parser.add_argument("group")
    parser.add_argument("--agent", default="", help="only this agent's")
    add_json_flag(parser)
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    request = pb.ListCheckpointsRequest(group=args.group, agent_id=args.agent)
    cps, code = target.admin_calls(
        args, PROG, lambda conn: target.every_page(conn, "ListCheckpoints", request, "checkpoints")[1])
    if code:
        return code
    if args.json:
        print_json([plain(cp) for cp in cps])
        return 0
    print_table(("AGENT", "INDEX", "KIND", "EPOCH", "STABLE", "SIZE", "CREATED", "BLOB"),
                [(cp.agent_id, cp.index, enum_word(pb.CheckpointKind, cp.kind), cp.epoch, "yes" if cp.stable else "no",
                  cp.size, utc(cp.created_at), shown_uri(cp.blob_uri)) for cp in cps])
    return 0
