"""A stranger at the leader's Raft port: a 24 MB flood and idle connections, with and
without the guard (RaftPortLimits in coordinator/replication/pysyncobj_adapter.py).

For each variant, a 3-node cluster on loopback; the flood announces a 24 MB message
and streams it at the leader, then a write is committed through the leader. Printed:
bytes sent before the leader closed the connection (socket buffers included), seconds
until it closed it, the
terms the cluster went through (an election is a new term), and the write's latency
after it; then how long an idle connection that never authenticates stays open (cut
off at --idle-wait). The unguarded variant runs the node with the guard switched off
in-process (no flag offers that). Numbers vary with the machine: compare the rows.

    python benchmarks/raft_port.py [--flood-mb 24] [--idle-wait 15]
"""
from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

SETTINGS = {"raft_min_timeout": 0.4, "raft_max_timeout": 0.8, "leader_fallback_timeout": 1.0}


def run_unguarded_node(argv: list[str]) -> int:
    """A coordinator node whose Raft port takes anything, as pysyncobj does."""
    from coordinator import main as node_main
    from coordinator.replication import pysyncobj_adapter

    pysyncobj_adapter.GuardedConnection._oversized = lambda self: None
    pysyncobj_adapter.FlushingTransport._limits = property(
        lambda self: pysyncobj_adapter.RaftPortLimits(auth_timeout_s=float("inf")))
    return node_main.main(argv)


def flood(address: str, size: int) -> tuple[int, float]:
    host, _, port = address.rpartition(":")
    chunk, sent = b"\0" * (1 << 16), 0
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(struct.pack("i", size))
        try:
            while sent < size:
                sent += sock.send(chunk)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # until the node closes it (or the timeout)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass
    return sent, time.perf_counter() - started


def idle_seconds(address: str, wait: float) -> float | None:
    host, _, port = address.rpartition(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        try:
            sock.recv(1)
        except TimeoutError:
            return None
        except ConnectionResetError:
            pass
    return time.perf_counter() - started


def commit_latency(cluster: LocalCluster) -> float:
    from tests.support.cluster import Client

    client = Client(cluster)
    started = time.perf_counter()
    client.create_group(group=f"g{time.monotonic_ns()}")
    return time.perf_counter() - started


def measure(guarded: bool, flood_mb: int, idle_wait: float) -> dict[str, str]:
    program = None if guarded else (lambda i: [sys.executable, __file__, "--unguarded-node"])
    with tempfile.TemporaryDirectory() as root, \
            LocalCluster(Path(root), 3, settings=SETTINGS, program=program).start_all() as cluster:
        leader = cluster.leader()
        commit_latency(cluster)
        terms_before = max(s.term for s in cluster.statuses().values())
        taken, seconds = flood(leader.raft, flood_mb << 20)
        cluster.leader()
        latency = commit_latency(cluster)
        terms_after = max(s.term for s in cluster.statuses().values())
        idle = idle_seconds(cluster.leader().raft, idle_wait)
        return {"variant": "guarded" if guarded else "unguarded", "taken": f"{taken / (1 << 20):.2f} MB",
                "flood_s": f"{seconds:.2f}", "new_terms": str(terms_after - terms_before),
                "write_after_ms": f"{latency * 1000:.0f}",
                "idle_open_s": f"{idle:.1f}" if idle is not None else f"> {idle_wait:g}"}


def main() -> int:
    if sys.argv[1:2] == ["--unguarded-node"]:
        return run_unguarded_node(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-mb", type=int, default=24)
    parser.add_argument("--idle-wait", type=float, default=15.0)
    args = parser.parse_args()
    rows = [measure(guarded, args.flood_mb, args.idle_wait) for guarded in (False, True)]
    print("| variant | flood sent before close | flood lasted (s) | new terms | write after (ms) | idle conn open (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['taken']} | {r['flood_s']} | {r['new_terms']} | {r['write_after_ms']} "
              f"| {r['idle_open_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
