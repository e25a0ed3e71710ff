"""`raftpoint cluster up`: a local N-node cluster on loopback until Ctrl-C.

Restartable: a data dir remembers its cluster's ports and Raft password
(endpoints.json, raft-password), and `cluster up` on it again starts the same
cluster. One `cluster up` per data dir: it takes the directory's lock before it
writes anything there, so a second one started beside it exits at once and
leaves the first one's files alone. It watches its own processes only: a leader is
looked for among its running nodes, and a node that exits is reported with its last
log line.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from coordinator.endpoints_file import DEFAULT_DATA_DIR, ENDPOINTS_FILE, LayoutMismatch
from coordinator.harness.local_cluster import LocalCluster, NodeProcess
from coordinator.service import ports
from coordinator.storage.dir_lock import DataDirInUse, DataDirLock

PROG = "raftpoint cluster up"
WATCH_PERIOD_S = 0.5


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cluster", help="run a local cluster on loopback")
    actions = parser.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start N coordinator processes and wait for Ctrl-C")
    up.add_argument("-n", "--nodes", type=int, default=3, help="number of nodes (3 or 5 recommended)")
    up.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR), help="where node data and logs go")
    up.add_argument("--base-port", type=int, default=None,
                    help="node i listens on base+3i (raft), +1 (grpc), +2 (metrics); default: free ports "
                         "(on a data dir used before: the ports it was first started on)")
    up.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a leader")
    up.set_defaults(func=run_up)


def _error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        _error("-n must be between 1 and 9")
        return 2
    if args.base_port is not None and not 1024 <= args.base_port <= 65535 - 3 * args.nodes:
        _error(f"--base-port must leave room for {3 * args.nodes} ports in 1024..65535")
        return 2
    try:
        with DataDirLock(args.data_dir, holder="another `raftpoint cluster up`",
                         advice=f"is a cluster already running on {args.data_dir}? Stop it first, "
                                "or use another --data-dir"):
            return _up(args)
    except DataDirInUse as exc:
        _error(str(exc))
        return 1


def _up(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.reopen(args.data_dir, args.nodes, base_port=args.base_port)
        cluster.stop_nodes_with_this_process = True
        for n in cluster.nodes:
            ports.check_all({f"node{n.index} Raft": n.raft, f"node{n.index} gRPC": n.grpc,
                             f"node{n.index} metrics": n.metrics})
    except LayoutMismatch as exc:
        _error(str(exc))
        return 2
    except OSError as exc:  # an unwritable data dir, or a port in use (this cluster already running?)
        _error(f"{exc}; is a cluster already running on {args.data_dir}?" if isinstance(exc, ports.PortUnavailable)
               else str(exc))
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster.start_all()
        leader = _wait_for_leader(cluster, args.timeout, stop)
        if leader is None:
            if not stop.is_set():
                _error(f"no leader within {args.timeout:.0f}s; node logs are in {args.data_dir}")
                _report_exits(cluster, set())
            return 1
        for n in cluster.nodes:
            print(f"node{n.index}: raft {n.raft}  grpc {n.grpc}  metrics http://{n.metrics}/metrics  pid {n.process.pid}")
        print(f"leader: node{leader.index} ({leader.grpc})")
        if cluster.token:
            print(f"admin token in {cluster.token_file} (pass it with --token-file, or token= in Connection)")
        tls = cluster.client_tls()
        print(f"TLS with a throw-away CA: {tls.ca_file}; admin client certificate {tls.cert_file} "
              f"(raftpoint status/members/gc/group --data-dir {args.data_dir} find them)")
        print(f"an identity for agents, bound to one group: raftpoint auth add-agent NAME --group GROUP "
              f"--data-dir {args.data_dir}")
        print(f"endpoints written to {args.data_dir / ENDPOINTS_FILE}; Ctrl-C stops the cluster", flush=True)
        return _watch(cluster, stop)
    finally:
        cluster.close()
        print("cluster stopped")


def _wait_for_leader(cluster: LocalCluster, timeout: float, stop: threading.Event) -> NodeProcess | None:
    """A leader among this cluster's running nodes; None at the deadline, on Ctrl-C, or
    as soon as every node has exited (a leader elsewhere on these ports is not ours).
    Polls in short slices so Ctrl-C during startup stops the cluster at once."""
    end = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < end:
        if not any(n.alive for n in cluster.nodes):
            return None
        try:
            leader = cluster.leader(min(1.0, max(0.0, end - time.monotonic())))
        except TimeoutError:
            continue
        if leader.alive:
            return leader
    return None


def _watch(cluster: LocalCluster, stop: threading.Event) -> int:
    """Until Ctrl-C, report each node that exits; give up when none is left."""
    reported: set[int] = set()
    while not stop.wait(WATCH_PERIOD_S):
        _report_exits(cluster, reported)
        if len(reported) == len(cluster.nodes):
            _error("every node has exited")
            return 1
    return 0


def _report_exits(cluster: LocalCluster, reported: set[int]) -> None:
    for n in cluster.nodes:
        if n.index in reported or n.process is None or n.alive:
            continue
        reported.add(n.index)
        log = cluster.root / f"node{n.index}.log"
        print(f"node{n.index} exited with code {n.process.returncode}: {_last_line(log)} (log: {log})",
              file=sys.stderr, flush=True)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
