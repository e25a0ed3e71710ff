"""`raftpoint whatif G --fail AGENT ...`: where the group would roll back if those agents failed now.

Answered by the WhatIf RPC from the same plan a failure's recovery applies; nothing
changes."""
from __future__ import annotations

import argparse

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target
from raftpoint.cli.output import add_json_flag, plain, print_json, print_table

PROG = "raftpoint whatif"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("whatif", help="which agents would roll back, and where, if some failed now",
                            description=__doc__.splitlines()[0])
    parser.add_argument("group")
    parser.add_argument("--fail", action="append", required=True, metavar="AGENT",
                        help="an agent assumed failed (repeatable)")
    add_json_flag(parser)
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer, code = target.admin_call(args, PROG, "WhatIf", pb.WhatIfRequest(group=args.group, failed=args.fail))
    if code:
        return code
    if args.json:
        print_json(plain(answer))
        return 0
    print(f"if {', '.join(args.fail)} failed now, group {args.group} would roll back:")
    print_table(("AGENT", "BACK TO", "INTERVALS LOST"),
                [(t.agent_id, t.checkpoint_index or "initial state", t.intervals_lost) for t in answer.targets])
    return 0
