"""`raftpoint status`: each node's Raft and store state, from ClusterStatus."""
from __future__ import annotations

import argparse
import sys

from coordinator.harness.local_cluster import node_status
from raftpoint.cli import target


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("status", help="show role, term and indexes of every node")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        where = target.resolve(args)
    except (OSError, ValueError) as exc:
        print(f"raftpoint status: {exc}", file=sys.stderr)
        return 2
    row = "{:<22} {:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>9}  {}"
    print(row.format("node (grpc)", "role", "term", "commit", "applied", "log", "snapshot", "snap age", "digest"))
    leaders = 0
    for endpoint in where.endpoints:
        s = node_status(endpoint, token=where.token)
        if s is None:
            print(row.format(endpoint, "DOWN", "-", "-", "-", "-", "-", "-", "-"))
            continue
        leaders += s.role == "leader"
        age = f"{s.last_snapshot_age_s:.0f}s" if s.last_snapshot_age_s >= 0 else "-"
        print(row.format(endpoint, s.role, s.term, s.commit_index, s.applied_index, s.log_entries,
                         s.last_snapshot_index, age, s.state_digest[:12]))
    if not leaders:
        print("no leader", file=sys.stderr)
        return 1
    return 0
