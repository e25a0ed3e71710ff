"""CPU per Kubernetes probe: the exec probe (`python -m coordinator.service.probe`, gRPC
health over the node's TLS) against GET /livez on the node's plain probe port.

One node (a single-node cluster, TLS on gRPC) serves both; each kind is run `--count`
times in a row. For each it reports the probing side's CPU (the exec probe's child
processes, from RUSAGE_CHILDREN; the HTTP client's, this process's own) and the
node's (/proc), the node's idle CPU over the same wall time taken off. The kubelet's
HTTP client is Go, cheaper than urllib here: the HTTP client column overstates it.
Linux only. Run: python benchmarks/probe_cost.py [--count 200]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _proc import cpu_seconds  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster, free_ports, wait_for  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    return time.process_time()


def measure(count: int, node_pid: int, probe: Callable[[], None], client_cpu: Callable[[], float],
            idle_per_s: float) -> tuple[float, float, float]:
    """(client CPU s, node CPU s beyond idle, wall s) of `count` probes."""
    client0, node0, wall0 = client_cpu(), cpu_seconds(node_pid), time.monotonic()
    for _ in range(count):
        probe()
    wall = time.monotonic() - wall0
    return client_cpu() - client0, max(0.0, cpu_seconds(node_pid) - node0 - idle_per_s * wall), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    [probe_port] = free_ports(1)
    probes = f"127.0.0.1:{probe_port}"
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(Path(tmp), 1, settings={"probe_address": probes}).start_all() as cluster:
        node = cluster.nodes[0]
        cluster.leader()
        assert cluster.ca is not None
        cert = cluster.server_certificate(node)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
        env.update({"RAFTPOINT_RAFT_PASSWORD": cluster.password, "RAFTPOINT_RAFT_ADDRESS": node.raft,
                    "RAFTPOINT_GRPC_ADDRESS": node.grpc, "RAFTPOINT_METRICS_ADDRESS": node.metrics,
                    "RAFTPOINT_TLS_CERT_FILE": str(cert.cert_file), "RAFTPOINT_TLS_KEY_FILE": str(cert.key_file),
                    "RAFTPOINT_TLS_CLIENT_CA_FILE": str(cluster.ca.ca_file), "RAFTPOINT_TLS_CLIENT_AUTH": "require"})
        wait_for(lambda: urllib.request.urlopen(f"http://{probes}/livez", timeout=2).status == 200, "/livez 200")

        def exec_probe() -> None:
            subprocess.run([sys.executable, "-m", "coordinator.service.probe", "--service", "raftpoint.liveness"],
                           env=env, check=True, capture_output=True, timeout=30)

        def http_probe() -> None:
            with urllib.request.urlopen(f"http://{probes}/livez", timeout=5) as reply:
                assert reply.status == 200
                reply.read()

        idle0, wall0 = cpu_seconds(node.process.pid), time.monotonic()
        time.sleep(3)
        idle_per_s = (cpu_seconds(node.process.pid) - idle0) / (time.monotonic() - wall0)
        rows = {"exec": measure(args.count, node.process.pid, exec_probe, children_cpu, idle_per_s),
                "http": measure(args.count, node.process.pid, http_probe, own_cpu, idle_per_s)}
    print(f"{args.count} probes each; node idle {idle_per_s * 100:.1f}% of a core (taken off)")
    print(f"{'probe':6} {'client ms/probe':>16} {'node ms/probe':>14} {'total ms/probe':>15} {'wall ms/probe':>14}")
    for name, (client, node_cpu, wall) in rows.items():
        print(f"{name:6} {client / args.count * 1e3:16.2f} {node_cpu / args.count * 1e3:14.2f} "
              f"{(client + node_cpu) / args.count * 1e3:15.2f} {wall / args.count * 1e3:14.2f}")
    (ec, en, _), (hc, hn, _) = rows["exec"], rows["http"]
    print(f"exec / http, CPU per probe: {(ec + en) / max(hc + hn, 1e-9):.0f}x")


if __name__ == "__main__":
    main()
