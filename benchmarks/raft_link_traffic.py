"""Raft traffic on a running 3-node cluster, counted by the nodes themselves.

Each node counts the Raft messages it sends (raftpoint_raft_messages_sent_total, by
type and framing) and its Raft thread's ticks (raftpoint_raft_ticks_total). This
reads those counters from every node's metrics port around two phases:
- idle: no client for --idle seconds: ticks (wake-ups) and messages per second per
  node, and the servers' CPU;
- one in flight: CommitCheckpoint calls back to back on one channel to the leader
  for --seconds: messages per commit (all nodes), by type and framing, and CPU per
  commit.
Run: python benchmarks/raft_link_traffic.py [--idle 5] [--seconds 4]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _proc import total_cpu_seconds  # noqa: E402
from api_vs_etcd import commit_request, run_load  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

Counts = Counter  # (node, metric, type, framing) -> value


def scrape(cluster: LocalCluster) -> Counts:
    counts: Counts = Counter()
    for node in cluster.nodes:
        text = urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "raftpoint_raft_ticks_total":
                    counts[(node.index, "ticks", "", "")] += sample.value
                elif sample.name == "raftpoint_raft_messages_sent_total":
                    counts[(node.index, "sent", sample.labels["type"], sample.labels["framing"])] += sample.value
    return counts


def delta(after: Counts, before: Counts) -> Counts:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)})


async def commits(leader: str, cluster: LocalCluster, seconds: float) -> int:
    async with cluster.client_tls().aio_channel(leader) as ch:
        agent, admin = pb_grpc.AgentServiceStub(ch), pb_grpc.AdminServiceStub(ch)
        await admin.CreateGroup(pb.CreateGroupRequest(request_id="g", spec=pb.GroupSpec(
            group="bench", mode=pb.CIC_BCS, lease_ttl_s=3600)))
        await agent.Register(pb.RegisterRequest(secret=b"s" * 16, request_id="r0", group="bench", agent_id="a0"))
        next_index: dict[int, int] = {}

        def make(n: int, i: int):
            request = commit_request(next_index, f"c-{n}-{i}", n)
            return lambda: agent.CommitCheckpoint(request, timeout=10)
        result = await run_load(make, 1, seconds, 1_000_000)
    return result["ops"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--idle", type=float, default=5.0)
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-raft-link-") as tmp, LocalCluster(Path(tmp), 3) as cluster:
        cluster.start_all()
        pids = [n.process.pid for n in cluster.nodes]
        leader = cluster.leader()
        time.sleep(1.0)  # connections settle after the election
        before, cpu0, t0 = scrape(cluster), total_cpu_seconds(pids), time.monotonic()
        time.sleep(args.idle)
        idle, idle_cpu, idle_s = delta(scrape(cluster), before), total_cpu_seconds(pids) - cpu0, time.monotonic() - t0
        before, cpu0 = scrape(cluster), total_cpu_seconds(pids)
        done = asyncio.run(commits(leader.grpc, cluster, args.seconds))
        busy, busy_cpu = delta(scrape(cluster), before), total_cpu_seconds(pids) - cpu0
    print(f"idle {idle_s:.1f} s; node {leader.index} leads; servers' CPU {100 * idle_cpu / idle_s:.1f}% of a core")
    print("| node | ticks/s | messages sent/s |")
    print("|---|---:|---:|")
    for i in range(3):
        ticks = idle[(i, "ticks", "", "")] / idle_s
        sent = sum(v for (n, m, _, _), v in idle.items() if n == i and m == "sent") / idle_s
        print(f"| {i}{' (leader)' if i == leader.index else ''} | {ticks:.0f} | {sent:.0f} |")
    print()
    print(f"one in flight: {done} commits in {args.seconds:g} s ({done / args.seconds:.0f}/s), "
          f"{1e3 * busy_cpu / max(done, 1):.2f} ms of the servers' CPU per commit")
    print("| sender | type | framing | per commit |")
    print("|---|---|---|---:|")
    for (n, metric, kind, framing), v in sorted(busy.items()):
        if metric == "sent":
            print(f"| {'leader' if n == leader.index else f'follower {n}'} | {kind} | {framing} | {v / done:.2f} |")
    ticks = sum(v for (_, m, _, _), v in busy.items() if m == "ticks")
    print(f"all messages: {sum(v for (_, m, _, _), v in busy.items() if m == 'sent') / done:.2f} per commit; "
          f"ticks (all nodes): {ticks / done:.2f} per commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
