"""`raftpoint status`: each node's Raft and store state, from ClusterStatus."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.harness.local_cluster import node_status, read_endpoints


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("status", help="show role, term and indexes of every node")
    parser.add_argument("--endpoints", help="comma-separated gRPC addresses (default: from --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path("raftpoint-data"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.endpoints:
        endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    else:
        try:
            endpoints = read_endpoints(args.data_dir)
        except (OSError, ValueError) as exc:
            print(f"raftpoint status: no --endpoints and {exc}", file=sys.stderr)
            return 2
    row = "{:<22} {:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>9}  {}"
    print(row.format("node (grpc)", "role", "term", "commit", "applied", "log", "snapshot", "snap age", "digest"))
    leaders = 0
    for endpoint in endpoints:
        s = node_status(endpoint)
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
