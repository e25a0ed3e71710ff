"""`raftpoint restore G --savepoint S | --containing AGENT:INDEX ... [--dry-run]`: a group back in time
(or, with --into NEW, a savepoint restored into a new group beside it: raftpoint.cli.fork).

Every member that has not left is ordered back to its checkpoint on one consistent
global checkpoint (the savepoint's, or the newest one containing the checkpoints
named), as a failure recovery orders agents back; the group is recovering until each
has obeyed. With --dry-run nothing changes: the table says what each agent would lose."""
from __future__ import annotations

import argparse
import sys
import uuid

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import fork, target
from raftpoint.cli.output import add_json_flag, plain, print_json, print_table

PROG = "raftpoint restore"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("restore", help="roll a whole group back to a savepoint or a consistent line",
                            description=__doc__.splitlines()[0])
    parser.add_argument("group")
    line = parser.add_mutually_exclusive_group(required=True)
    line.add_argument("--savepoint", metavar="NAME", help="the savepoint to go back to")
    line.add_argument("--containing", nargs="+", metavar="AGENT:INDEX",
                      help="stable checkpoints the line must contain: the newest consistent line with them")
    parser.add_argument("--dry-run", action="store_true", help="say what each agent would lose; change nothing")
    parser.add_argument("--into", metavar="NEW", help="restore the savepoint into a new group NEW instead, beside "
                                                      "the original (which goes on running)")
    parser.add_argument("--blob-store", metavar="DIR|URL",
                        help="with --into: the blob store holding the savepoint's checkpoints, where the fork's "
                             "copies of their manifests are made")
    add_json_flag(parser)
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def saved_checkpoint(text: str) -> pb.SavedCheckpoint:
    """AGENT:INDEX (split at the last colon: agent ids may hold one); ValueError naming it."""
    agent, sep, index = text.rpartition(":")
    if not sep or not agent or not index.isdigit() or int(index) < 1:
        raise ValueError(f"--containing {text!r}: expected AGENT:INDEX with an index of 1 or more")
    return pb.SavedCheckpoint(agent_id=agent, index=int(index))


def run(args: argparse.Namespace) -> int:
    refused = fork.refusal(args)
    if refused:
        print(f"{PROG}: {refused}", file=sys.stderr)
        return 2
    if args.into:
        return fork.run(args)
    try:
        containing = [saved_checkpoint(text) for text in args.containing or ()]
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    request = pb.RestoreGroupRequest(request_id=f"restore-{uuid.uuid4().hex}", group=args.group,
                                     savepoint=args.savepoint or "", containing=containing, dry_run=args.dry_run)
    answer, code = target.admin_call(args, PROG, "RestoreGroup", request)
    if code:
        return code
    if args.json:
        print_json(plain(answer))
        return 0
    line = f"savepoint {args.savepoint}" if args.savepoint else "the newest consistent line containing " + " ".join(
        args.containing)
    epoch = f" (stable epoch {answer.epoch})" if answer.epoch else ""
    if answer.dry_run:
        print(f"dry run: restoring group {args.group} to {line}{epoch} would roll back (nothing was changed):")
    else:
        print(f"group {args.group} is restoring to {line}{epoch} as recovery {answer.recovery_id}; "
              "each agent rolls back when it obeys its order:")
    print_table(("AGENT", "BACK TO", "INTERVALS LOST", "CHECKPOINTS LOST", "SENDS UNDONE", "RECEIVES UNDONE"),
                [(s.agent_id, s.checkpoint_index or "initial state", s.intervals_lost,
                  " ".join(map(str, s.checkpoints_lost)) or "-", s.sends_undone, s.receives_undone)
                 for s in answer.steps])
    return 0
