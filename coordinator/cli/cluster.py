"""`raftpoint cluster up`: a local N-node cluster on loopback until Ctrl-C."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from coordinator.cli.local_cluster import LocalCluster


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cluster", help="run a local cluster on loopback")
    actions = parser.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start N coordinator processes and wait for Ctrl-C")
    up.add_argument("-n", "--nodes", type=int, default=3, help="number of nodes (3 or 5 recommended)")
    up.add_argument("--data-dir", type=Path, default=Path("raftpoint-data"), help="where node data and logs go")
    up.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a leader")
    up.set_defaults(func=run_up)


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("raftpoint cluster up: -n must be between 1 and 9", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = LocalCluster(args.data_dir, args.nodes).start_all()
    try:
        try:
            leader = cluster.leader(args.timeout)
        except TimeoutError as exc:
            print(f"raftpoint cluster up: {exc}; node logs are in {args.data_dir}", file=sys.stderr)
            return 1
        for n in cluster.nodes:
            print(f"node{n.index}: raft {n.raft}  grpc {n.grpc}  metrics http://{n.metrics}/metrics  pid {n.process.pid}")
        print(f"leader: node{leader.index} ({leader.grpc})")
        print(f"endpoints written to {args.data_dir / 'endpoints.json'}; Ctrl-C stops the cluster", flush=True)
        stop.wait()
        return 0
    finally:
        cluster.close()
        print("cluster stopped")
