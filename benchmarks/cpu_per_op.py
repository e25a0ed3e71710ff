"""Server CPU per operation: an idle 3-node cluster, and CommitCheckpoint at 1 and 128 in flight.

For each phase it reads every node process's CPU time (user + system, /proc) before
and after, so the table shows what the servers spent, not the load generator:
idle CPU % of the leader and of each follower, and, under load, commits/s, p50
latency and server CPU-seconds per commit (all three nodes together). Linux only.
The machine's other work shows in every number: compare rows of one run.
`--etcd` also measures three idle etcd members (Debian's etcd) for the same time,
for comparison: Raft's heartbeats cost any idle cluster something.
`--profile` also samples every node with py-spy during each load phase and prints,
per node, the share of its samples and of its CPU per commit that each part of a
write's path took (benchmarks/_profile.py says how samples are sorted).
Run: python benchmarks/cpu_per_op.py [--idle 10] [--seconds 8] [--in-flight 1,128] [--profile] [--etcd]
     [--set auto_tick_period=0.02]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_client.connection import overload_hint  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc  # noqa: E402
from coordinator.channels import ClientTLS  # noqa: E402
import _profile  # noqa: E402
from _proc import cpu_seconds  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster, wait_for  # noqa: E402



SECRET = b"s" * 16  # the agent secret Register takes and every agent write repeats



def cpu_of(cluster: LocalCluster) -> dict[int, float]:
    return {n.index: cpu_seconds(n.process.pid) for n in cluster.nodes}


async def commits(leader: str, concurrency: int, seconds: float, metadata: tuple = (),
                  tls: ClientTLS | None = None) -> tuple[int, list[float]]:
    """`metadata`: the cluster's admin token, on every call; `tls`: the cluster's client TLS."""
    tls = tls or ClientTLS.plaintext()
    latencies: list[float] = []
    shed = [0]
    # Several connections: one carries at most 128 calls at once (ServerLimits).
    channels = [tls.aio_channel(leader, [("bench.connection", n)]) for n in range(4)]
    try:
        admin = pb_grpc.AdminServiceStub(channels[0])
        stubs = [pb_grpc.AgentServiceStub(c) for c in channels]
        group = f"bench-{concurrency}"
        await admin.CreateGroup(pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
            group=group, mode=pb.UNCOORDINATED, lease_ttl_s=3600)), timeout=10, metadata=metadata)
        incarnations = {}
        for lane in range(concurrency):
            reply = await stubs[lane % 4].Register(pb.RegisterRequest(request_id=f"r-{group}-{lane}", group=group,
                                                           agent_id=f"a{lane}", secret=SECRET), timeout=10,
                                                      metadata=metadata)
            incarnations[lane] = reply.incarnation
        end = time.monotonic() + seconds

        async def run(lane: int) -> None:
            index = 0
            while time.monotonic() < end:
                index += 1
                started = time.perf_counter()
                request = pb.CommitCheckpointRequest(
                    request_id=f"c-{group}-{lane}-{index}", token=pb.FencingToken(incarnation=incarnations[lane], secret=SECRET),
                    checkpoint=pb.CheckpointMeta(group=group, agent_id=f"a{lane}", index=index, kind=pb.BASIC,
                                                 blob_uri=f"file:///b/{lane}/{index}", sha256="c" * 64, size=200))
                while True:
                    try:
                        await stubs[lane % 4].CommitCheckpoint(request, timeout=10, metadata=metadata)
                        break
                    except grpc.RpcError as err:  # shed: wait the node's hint, as the client does
                        hint = overload_hint(err)
                        if hint is None:
                            raise
                        shed[0] += 1
                        await asyncio.sleep(hint)
                latencies.append(time.perf_counter() - started)
        await asyncio.gather(*(run(lane) for lane in range(concurrency)))
    finally:
        for channel in channels:
            await channel.close()
    return len(latencies), latencies


def idle_etcd(seconds: float) -> None:
    """Print the idle CPU % of each of three etcd members (TLS to clients, as api_vs_etcd runs them)."""
    from api_vs_etcd import EtcdCluster, etcd_available
    missing = etcd_available()
    if missing:
        print(f"etcd idle: skipped ({missing})")
        return
    with tempfile.TemporaryDirectory(prefix="cpu-per-op-etcd-") as tmp:
        etcd = EtcdCluster(Path(tmp), insecure=False)
        try:
            wait_for(etcd.all_up, "etcd members up", 60.0, 0.2)
            time.sleep(2.0)
            pids = [p.pid for p in etcd.procs]
            before = [cpu_seconds(pid) for pid in pids]
            time.sleep(seconds)
            used = [100 * (cpu_seconds(pid) - b) / seconds for pid, b in zip(pids, before)]
            leader = etcd.leader()
            print(f"etcd idle CPU %: leader {used[leader]:.1f}, followers "
                  + ", ".join(f"{u:.1f}" for i, u in enumerate(used) if i != leader) if leader is not None
                  else f"etcd idle CPU %: {used}")
        finally:
            etcd.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle phase")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each load phase")
    parser.add_argument("--in-flight", default="1,128", help="commits in flight of each load phase")
    parser.add_argument("--profile", action="store_true", help="sample each node with py-spy under load")
    parser.add_argument("--etcd", action="store_true", help="also measure three idle etcd members")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a node setting (e.g. auto_tick_period=0.02); repeatable")
    args = parser.parse_args()
    if args.profile and _profile.py_spy() is None:
        parser.error("--profile needs py-spy (pip install py-spy)")
    settings = dict(s.split("=", 1) for s in args.set)
    if args.etcd:
        idle_etcd(args.idle)
    with tempfile.TemporaryDirectory(prefix="cpu-per-op-") as tmp, \
            LocalCluster(Path(tmp) / "cluster", 3, settings=settings).start_all() as cluster:
        leader = cluster.leader()
        time.sleep(2.0)  # let start-up work (elections, first snapshot checks) pass
        before = cpu_of(cluster)
        time.sleep(args.idle)
        used = {i: cpu_of(cluster)[i] - before[i] for i in before}
        followers = [i for i in used if i != leader.index]
        print(f"idle CPU %: leader {100 * used[leader.index] / args.idle:.1f}, followers "
              + ", ".join(f"{100 * used[i] / args.idle:.1f}" for i in followers))
        print("| in flight | commits/s | p50 ms | server CPU-s per commit | server CPU % (3 nodes) |")
        print("|---|---|---|---|---|")
        profiles = {}
        for concurrency in (int(c) for c in args.in_flight.split(",")):
            samplers = {n.index: (_profile.start(n.process.pid, args.seconds, Path(tmp) / f"n{n.index}-{concurrency}"),
                                  Path(tmp) / f"n{n.index}-{concurrency}") for n in cluster.nodes} \
                if args.profile else {}
            before, started = cpu_of(cluster), time.monotonic()
            n, latencies = asyncio.run(commits(leader.grpc, concurrency, args.seconds, cluster.credentials,
                                                 cluster.client_tls()))
            elapsed = time.monotonic() - started
            after = cpu_of(cluster)
            spent = sum(after.values()) - sum(before.values())
            print(f"| {concurrency} | {n / args.seconds:.0f} | {1000 * statistics.median(latencies):.1f} | "
                  f"{spent / max(n, 1) * 1000:.2f} ms | {100 * spent / elapsed:.0f} |")
            if samplers:
                profiles[concurrency] = {
                    ("leader" if i == leader.index else f"follower {i}"):
                        (_profile.finish(sampler, out), 1000 * (after[i] - before[i]) / max(n, 1))
                    for i, (sampler, out) in samplers.items() if sampler is not None}
        for concurrency, rows in profiles.items():
            print(f"\nWhere each node's CPU per commit went at {concurrency} in flight (py-spy samples):\n")
            print(_profile.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
