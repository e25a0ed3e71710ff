"""`raftpoint repair --from-peers`: set a stopped node up to rebuild from its peers.

For a node that refused to start on damaged data (exit code 65 and a message
saying so): its journal, snapshot and store are moved aside, its term and vote
kept, and its next start fetches everything from the cluster. The term file also
records that its log was lost: until a leader has caught it up, the node grants no
vote and stands for no election (it may have acknowledged entries that it no
longer holds).
"""
from __future__ import annotations

import argparse
import sys

from coordinator.replication.rebuild import prepare_rebuild
from raftpoint.cli import stopped_node

PROG = "raftpoint repair"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("repair", help="rebuild a stopped node's data from its peers")
    parser.add_argument("--from-peers", action="store_true", required=True,
                        help="move the journal, snapshot and store aside; the next start fetches them from the "
                             "cluster (the only repair there is)")
    stopped_node.add_data_dir(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data_dir = stopped_node.data_dir_of(args, PROG)
    if data_dir is None:
        return 2
    try:
        prepared = prepare_rebuild(data_dir)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: cannot move the damaged files in {data_dir} aside: {exc}", file=sys.stderr)
        return 1
    if not prepared.moved:
        print(f"{PROG}: nothing to move in {data_dir}: the node already starts empty")
        return 0
    kept = " (kept its term and vote; it votes again once a leader has caught its log up)" if prepared.kept_vote else ""
    print(f"moved {', '.join(prepared.moved)} to {prepared.aside}{kept}; start the node again with the same flags: "
          "it rebuilds from its peers")
    return 0
