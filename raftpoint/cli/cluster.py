"""`raftpoint cluster up`: a local N-node cluster on loopback until Ctrl-C."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from coordinator.harness.local_cluster import LocalCluster, NodeProcess


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cluster", help="run a local cluster on loopback")
    actions = parser.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start N coordinator processes and wait for Ctrl-C")
    up.add_argument("-n", "--nodes", type=int, default=3, help="number of nodes (3 or 5 recommended)")
    up.add_argument("--data-dir", type=Path, default=Path("raftpoint-data"), help="where node data and logs go")
    up.add_argument("--base-port", type=int, default=None,
                    help="node i listens on base+3i (raft), +1 (grpc), +2 (metrics); default: free ports")
    up.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a leader")
    up.set_defaults(func=run_up)


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("raftpoint cluster up: -n must be between 1 and 9", file=sys.stderr)
        return 2
    if args.base_port is not None and not 1024 <= args.base_port <= 65535 - 3 * args.nodes:
        print(f"raftpoint cluster up: --base-port must leave room for {3 * args.nodes} ports in 1024..65535",
              file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = LocalCluster(args.data_dir, args.nodes, base_port=args.base_port).start_all()
    try:
        leader = _wait_for_leader(cluster, args.timeout, stop)
        if leader is None:
            if not stop.is_set():
                print(f"raftpoint cluster up: no leader within {args.timeout:.0f}s; node logs are in {args.data_dir}",
                      file=sys.stderr)
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


def _wait_for_leader(cluster: LocalCluster, timeout: float, stop: threading.Event) -> NodeProcess | None:
    """Poll in short slices so Ctrl-C during startup stops the cluster at once."""
    end = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < end:
        try:
            return cluster.leader(min(1.0, max(0.0, end - time.monotonic())))
        except TimeoutError:
            continue
    return None
