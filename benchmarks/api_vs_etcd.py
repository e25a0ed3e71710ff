"""raftpoint's gRPC API vs etcd, 3 members each on loopback, same Python grpc.aio client.

CommitCheckpoint (~200-byte record) vs etcd Put (200-byte value) at 1, 32 and 128 in
flight on one channel to the leader, and the same commits through agent Session
streams (one per lane); linearizable reads, GetGroup vs etcd Range, at the same
concurrencies (with the log entries the reads cost: none, by ReadIndex); ReportDependencies in batches of 100 at 8 and 32 in flight; and the
time from killing the leader to the next accepted write, over several kills (the
killed member is restarted and caught up before the next), reporting each and the
worst. etcd (Debian etcd-server) is installed if missing and possible; otherwise
its columns are skipped with a message. Both sides serve clients over TLS with client
certificates required (one throw-away CA each; etcd's --client-cert-auth); `--insecure`
runs both in plaintext instead. Peer (Raft) traffic is plaintext on both sides.
`--direct` runs the raftpoint nodes without their connection front (gRPC on the
port itself, no per-address caps), to measure what the front's hop costs; `--no-etcd`
leaves etcd out. `--reads-rounds N` measures only the linearizable reads, with both
clusters up at once and N rounds that alternate etcd and raftpoint, so that a shared,
noisy machine weighs on both sides alike; it prints each round, then the medians.
Run: python benchmarks/api_vs_etcd.py [--seconds 3] [--kills 3] [--insecure] [--direct] [--no-etcd]
     python benchmarks/api_vs_etcd.py --reads-rounds 3 --in-flight 32 [--seconds 5]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

import grpc
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_client.agent_stream import AsyncSessionStream  # noqa: E402
from agent_client.connection import AsyncConnection, Connection  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc  # noqa: E402
from coordinator.channels import ClientTLS  # noqa: E402
from coordinator.harness.certs import LocalCA  # noqa: E402
from _proc import total_cpu_seconds  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster, free_ports, wait_for  # noqa: E402

CONCURRENCY = (1, 32, 128)
SERVERS: list[int] = []  # the measured servers' process ids (raftpoint's, then etcd's)
# Dependency reports are latency-bound at low concurrency (each waits for the journal
# flushes of a Raft round), so both a light and a busy reporter population are shown.
DEPS_CONCURRENCY = (8, 32)
VALUE = b"v" * 200


# ---- a minimal protobuf wire codec for etcd's PutRequest / StatusResponse --------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fields(data: bytes) -> dict[int, object]:
    out, i = {}, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        field, kind = key >> 3, key & 7
        if kind == 0:
            out[field], i = _read_varint(data, i)
        elif kind == 2:
            length, i = _read_varint(data, i)
            out[field], i = data[i:i + length], i + length
        else:
            raise ValueError(f"unexpected wire type {kind}")
    return out


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def put_request(key: bytes) -> bytes:
    return b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(VALUE)) + VALUE


def range_request(key: bytes) -> bytes:
    """A RangeRequest for one key; linearizable (serializable is false by default)."""
    return b"\x0a" + _varint(len(key)) + key


def _raw(channel: grpc.aio.Channel, method: str):
    return channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


# ---- clusters -------------------------------------------------------------------

class EtcdCluster:
    def __init__(self, root: Path, insecure: bool) -> None:
        ports = free_ports(6)
        self.clients = [f"127.0.0.1:{ports[i]}" for i in range(3)]
        peers = [f"http://127.0.0.1:{ports[3 + i]}" for i in range(3)]
        initial = ",".join(f"e{i}={peers[i]}" for i in range(3))
        scheme, tls_flags = "http", []
        self.tls = ClientTLS.plaintext()
        if not insecure:
            ca = LocalCA.create(root / "etcd-tls")
            server = ca.server("etcd")
            scheme, self.tls = "https", ca.client_tls("bench")
            tls_flags = ["--cert-file", str(server.cert_file), "--key-file", str(server.key_file),
                         "--client-cert-auth", "--trusted-ca-file", str(ca.ca_file)]
        self.commands = [[
            "etcd", "--name", f"e{i}", "--data-dir", str(root / f"etcd{i}"),
            "--listen-client-urls", f"{scheme}://{self.clients[i]}",
            "--advertise-client-urls", f"{scheme}://{self.clients[i]}", *tls_flags,
            "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
            "--initial-cluster", initial, "--initial-cluster-state", "new", "--log-level", "error"] for i in range(3)]
        self.logs = [root / f"etcd{i}.log" for i in range(3)]
        self.procs: list[subprocess.Popen] = [None] * 3  # type: ignore[list-item]
        for i in range(3):
            self.start(i)

    def start(self, i: int) -> None:
        """(Re)start member i on its data directory (a restarted member rejoins from it)."""
        with open(self.logs[i], "ab") as log:
            self.procs[i] = subprocess.Popen(self.commands[i], stdout=log, stderr=log)

    def status(self, i: int) -> tuple[int, int] | None:
        """(this member's id, the leader's id) from Maintenance/Status."""
        try:
            with self.tls.channel(self.clients[i]) as ch:
                raw = ch.unary_unary("/etcdserverpb.Maintenance/Status", request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)(b"", timeout=1)
        except grpc.RpcError:
            return None
        top = _fields(raw)
        return _fields(top[1])[2], top.get(4, 0)

    def leader(self) -> int | None:
        for i, p in enumerate(self.procs):
            if p.poll() is None and (s := self.status(i)) and s[0] == s[1]:
                return i
        return None

    def all_up(self) -> bool:
        leader = self.leader()
        return leader is not None and all(self.status(i) is not None and self.status(i)[1] != 0 for i in range(3))

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(10)


def etcd_available() -> str | None:
    if shutil.which("etcd"):
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "etcd-server"], capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, timeout=300)
        if shutil.which("etcd"):
            return None
    return "etcd is not installed and could not be installed (apt-get install etcd-server)"


# ---- load -----------------------------------------------------------------------

async def run_load(make_call, concurrency: int, seconds: float, max_ops: int) -> dict:
    """`concurrency` lanes calling back to back; with the servers' CPU-seconds per call
    (all three members together, from /proc: SERVERS holds their process ids)."""
    latencies: list[float] = []
    refused = [0]
    end = time.monotonic() + seconds

    async def lane(n: int) -> None:
        i = 0
        while time.monotonic() < end and len(latencies) < max_ops:
            call = make_call(n, i)
            started = time.perf_counter()
            while True:
                try:
                    await call()
                    break
                except grpc.aio.AioRpcError as exc:
                    # 128 in flight is the server's per-connection stream cap: a stream
                    # opened before an earlier one is fully closed is refused
                    # (REFUSED_STREAM, never processed) and sent again, inside its latency;
                    # so is a read the node shed (RESOURCE_EXHAUSTED: too many queued).
                    if (exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
                            or time.monotonic() > end + 10):
                        raise
                    refused[0] += 1
            latencies.append(time.perf_counter() - started)
            i += 1

    t0, cpu0 = time.perf_counter(), total_cpu_seconds(SERVERS)
    await asyncio.gather(*(lane(n) for n in range(concurrency)))
    elapsed, cpu = time.perf_counter() - t0, total_cpu_seconds(SERVERS) - cpu0
    latencies.sort()
    pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3  # noqa: E731
    return {"ops_s": len(latencies) / elapsed, "p50": pct(0.5), "p99": pct(0.99), "ops": len(latencies),
            "refused": refused[0], "cpu_ms": 1e3 * cpu / max(1, len(latencies))}


def commit_request(next_index: dict[int, int], request_id: str, n: int) -> pb.CommitCheckpointRequest:
    """Lane n's agent's next checkpoint (~200 bytes of metadata)."""
    index = next_index[n] = next_index.get(n, 0) + 1
    return pb.CommitCheckpointRequest(request_id=request_id, token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
        checkpoint=pb.CheckpointMeta(group="bench", agent_id=f"a{n}", index=index, kind=pb.BASIC,
                                     blob_uri=f"file:///blobs/a{n}/{index}", sha256="ab" * 32, size=4096))


async def raftpoint_cells(leader: str, tls: ClientTLS, seconds: float, max_ops: int) -> dict:
    out = {}
    async with tls.aio_channel(leader) as ch:
        agent, admin = pb_grpc.AgentServiceStub(ch), pb_grpc.AdminServiceStub(ch)
        await setup_raftpoint(ch)
        next_index: dict[int, int] = {}
        for c in CONCURRENCY:
            def make(n: int, i: int, c=c):
                request = commit_request(next_index, f"c{c}-{n}-{i}", n)
                return lambda: agent.CommitCheckpoint(request, timeout=10)
            out[c] = await run_load(make, c, seconds, max_ops)
        out["session"] = await session_cells(leader, tls, seconds, max_ops, next_index)

        out.update(await raftpoint_reads(admin, seconds, max_ops))

        for c in DEPS_CONCURRENCY:
            def deps(n: int, i: int, c=c):  # ids unique per cell: a repeated one is answered from the dedupe table
                records = [pb.DependencyRecord(sender=f"a{(n + 1) % c}", send_interval=1, receiver=f"a{n}",
                                               receive_interval=10_000, message_id=f"m{c}-{n}-{i}-{k}")
                           for k in range(100)]
                request = pb.ReportDependenciesRequest(request_id=f"d{c}-{n}-{i}", group="bench", agent_id=f"a{n}",
                                                       token=pb.FencingToken(secret=b"s" * 16, incarnation=1), records=records)
                return lambda: agent.ReportDependencies(request, timeout=10)
            out[f"deps{c}"] = await run_load(deps, c, seconds, max_ops)
    return out


async def setup_raftpoint(ch: grpc.aio.Channel) -> None:
    """The group the cells write to and read, with one registered agent per lane."""
    agent, admin = pb_grpc.AgentServiceStub(ch), pb_grpc.AdminServiceStub(ch)
    await admin.CreateGroup(pb.CreateGroupRequest(request_id="bench-g", spec=pb.GroupSpec(
        group="bench", mode=pb.CIC_BCS, lease_ttl_s=3600)))
    for a in range(max(*CONCURRENCY, *DEPS_CONCURRENCY)):  # the dependency cells report among as many
        await agent.Register(pb.RegisterRequest(secret=b"s" * 16, request_id=f"bench-r{a}", group="bench", agent_id=f"a{a}"))


async def raftpoint_reads(admin: pb_grpc.AdminServiceStub, seconds: float, max_ops: int,
                          append_entries: Callable[[], float] | None = None) -> dict:
    """GetGroup at each concurrency, and the log entries the leader committed meanwhile;
    with `append_entries` (the leader's AppendEntries sent so far), those per read."""
    out: dict = {}
    appended_before = (await admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=10)).node.commit_index
    read = pb.GetGroupRequest(group="bench", page_size=1)  # the group record and one agent
    for c in CONCURRENCY:
        sent = append_entries() if append_entries else 0.0
        out[f"read{c}"] = await run_load(lambda n, i: (lambda: admin.GetGroup(read, timeout=10)), c, seconds, max_ops)
        if append_entries:
            out[f"read{c}"]["append_entries"] = (append_entries() - sent) / max(1, out[f"read{c}"]["ops"])
    appended_after = (await admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=10)).node.commit_index
    out["read_log_entries"] = appended_after - appended_before
    return out


async def etcd_reads(ch: grpc.aio.Channel, seconds: float, max_ops: int) -> dict:
    """Range of one key at each concurrency."""
    out: dict = {}
    get = _raw(ch, "/etcdserverpb.KV/Range")
    for c in CONCURRENCY:
        out[f"read{c}"] = await run_load(lambda n, i: (lambda: get(range_request(b"read-me"), timeout=10)), c,
                                         seconds, max_ops)
    return out


def append_entries_sent(metrics_address: str) -> float:
    """The AppendEntries a node has sent so far (raftpoint_raft_messages_sent_total)."""
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5).read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "raftpoint_raft_messages_sent_total" and sample.labels.get("type") == "append_entries")


async def alternating_reads(ours: tuple[str, ClientTLS, list[int]], theirs: tuple[str, ClientTLS, list[int]],
                            leader_metrics: str, rounds: int, seconds: float, max_ops: int) -> list[tuple[dict, dict]]:
    """`rounds` rounds of etcd's reads then raftpoint's, both clusters up throughout;
    with the AppendEntries raftpoint's leader sent per read (heartbeats included), and
    two floors: Health/Check, which passes the same front, gRPC server and interceptors
    and reads nothing, and ClusterStatus, which is authorized as GetGroup is but takes
    no read point (its digests are cached while the state does not change)."""
    global SERVERS
    out = []
    async with ours[1].aio_channel(ours[0]) as our_ch, theirs[1].aio_channel(theirs[0]) as their_ch:
        await setup_raftpoint(our_ch)
        await _raw(their_ch, "/etcdserverpb.KV/Put")(put_request(b"read-me"), timeout=10)
        admin = pb_grpc.AdminServiceStub(our_ch)
        for _ in range(rounds):
            SERVERS = theirs[2]
            etcd = await etcd_reads(their_ch, seconds, max_ops)
            SERVERS = ours[2]
            mine = await raftpoint_reads(admin, seconds, max_ops, lambda: append_entries_sent(leader_metrics))
            check = our_ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
            status = pb.ClusterStatusRequest()
            for c in CONCURRENCY:  # the floors: a call that reads nothing; one authorized that takes no read point
                mine[f"floor{c}"] = await run_load(lambda n, i: (lambda: check(b"", timeout=10)), c, seconds, max_ops)
                mine[f"status{c}"] = await run_load(lambda n, i: (lambda: admin.ClusterStatus(status, timeout=10)), c,
                                                    seconds, max_ops)
            out.append((mine, etcd))
    return out


def print_read_rounds(results: list[tuple[dict, dict]]) -> None:
    print("Linearizable reads, rounds alternating etcd and raftpoint: GetGroup (the group and one agent, ReadIndex) "
          "vs etcd Range (one key, linearizable); CPU = the three servers' CPU ms per read")
    header = ("round", "in flight", "ops/s", "p50 ms", "p99 ms", "CPU ms/op", "etcd ops/s", "etcd p50 ms",
              "etcd p99 ms", "etcd CPU ms/op", "ops/s ratio", "CPU ratio", "log entries", "AppendEntries/read",
              "Health/Check ops/s", "Health/Check CPU ms/op", "ClusterStatus ops/s", "ClusterStatus CPU ms/op")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    rows: dict[int, list[list[float]]] = {}
    for r, (o_all, t_all) in enumerate(results, 1):
        for c in CONCURRENCY:
            o, t = o_all[f"read{c}"], t_all[f"read{c}"]
            row = [o["ops_s"], o["p50"], o["p99"], o["cpu_ms"], t["ops_s"], t["p50"], t["p99"], t["cpu_ms"],
                   o["ops_s"] / t["ops_s"], o["cpu_ms"] / t["cpu_ms"] if t["cpu_ms"] else float("nan")]
            rows.setdefault(c, []).append(row)
            print(" | ".join([str(r), str(c), *(f"{v:.2f}" if v < 100 else f"{v:.0f}" for v in row),
                              str(o_all["read_log_entries"]), f"{o['append_entries']:.3f}",
                              *(f"{o_all[f'{k}{c}'][m]:{f}}" for k in ("floor", "status")
                                for m, f in (("ops_s", ".0f"), ("cpu_ms", ".2f")))]))
    for c, cells in rows.items():
        medians = [sorted(col)[len(col) // 2] for col in zip(*cells)]
        print(" | ".join(["median", str(c), *(f"{v:.2f}" if v < 100 else f"{v:.0f}" for v in medians), *[""] * 6]))


async def session_cells(leader: str, tls: ClientTLS, seconds: float, max_ops: int,
                        next_index: dict[int, int]) -> dict:
    """The same commits, each lane an agent on its own Session stream (all on one channel)."""
    out = {}
    conn = AsyncConnection([leader], tls=tls)
    streams = [AsyncSessionStream(conn, lambda order: None, lambda code, why: None) for _ in range(max(CONCURRENCY))]
    try:
        for c in CONCURRENCY:
            def make(n: int, i: int, c=c):
                request = commit_request(next_index, f"s{c}-{n}-{i}", n)
                return lambda: streams[n].call("CommitCheckpoint", request)
            out[c] = await run_load(make, c, seconds, max_ops)
    finally:
        for stream in streams:
            await stream.close()
        await conn.close()
    return out


async def etcd_cells(leader: str, tls: ClientTLS, seconds: float, max_ops: int) -> dict:
    out = {}
    async with tls.aio_channel(leader) as ch:
        put = _raw(ch, "/etcdserverpb.KV/Put")
        for c in CONCURRENCY:
            out[c] = await run_load(lambda n, i, c=c: (lambda: put(put_request(f"k{c}-{n}-{i}".encode()), timeout=10)),
                                    c, seconds, max_ops)
        await put(put_request(b"read-me"), timeout=10)
        out.update(await etcd_reads(ch, seconds, max_ops))
    return out


def failover_raftpoint(cluster: LocalCluster, kills: int) -> list[float]:
    """Kill the leader, time the next accepted write, restart the victim, wait until
    every node has caught up; `kills` times."""
    times = []
    for k in range(kills):
        conn = Connection(cluster.endpoints(), deadline=30, token=cluster.token, tls=cluster.client_tls())
        leader = cluster.leader()
        cluster.kill(leader.index)
        started = time.monotonic()
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"after-kill-{k}", spec=pb.GroupSpec(group=f"k{k}")))
        times.append(time.monotonic() - started)
        conn.close()
        cluster.start(leader.index)
        cluster.converged(60)
    return times


def failover_etcd(etcd: EtcdCluster, kills: int) -> list[float]:
    times = []
    for _ in range(kills):
        leader = wait_for(lambda: [etcd.leader()] if etcd.all_up() else None, "all etcd members up", 60)[0]
        times.append(_failover_etcd_once(etcd, leader))
        etcd.start(leader)
    return times


def _failover_etcd_once(etcd: EtcdCluster, leader: int) -> float:
    etcd.procs[leader].kill()
    etcd.procs[leader].wait(10)
    started = time.monotonic()
    survivors = [i for i in range(3) if i != leader]

    def accepted() -> bool:
        for i in survivors:
            try:
                with etcd.tls.channel(etcd.clients[i]) as ch:
                    ch.unary_unary("/etcdserverpb.KV/Put", request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)(put_request(b"after-kill"), timeout=0.5)
                return True
            except grpc.RpcError:
                continue
        return False
    wait_for(accepted, "etcd to accept a write after the leader kill", 30, 0.01)
    return time.monotonic() - started


def main() -> int:
    global CONCURRENCY, SERVERS
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--max-ops", type=int, default=50_000)
    p.add_argument("--kills", type=int, default=3, help="leader kills for the failover measurement")
    p.add_argument("--in-flight", default="1,32,128",
                   help="CommitCheckpoint/Put concurrencies (one channel carries at most 128 calls)")
    p.add_argument("--insecure", action="store_true", help="plaintext clients on both sides instead of TLS")
    p.add_argument("--direct", action="store_true", help="raftpoint nodes without the connection front")
    p.add_argument("--no-etcd", action="store_true", help="measure raftpoint only")
    p.add_argument("--reads-rounds", type=int, default=0,
                   help="only the reads: this many rounds alternating etcd and raftpoint, both clusters up")
    args = p.parse_args()
    CONCURRENCY = tuple(int(c) for c in args.in_flight.split(","))
    skip = "--no-etcd" if args.no_etcd else etcd_available()
    settings = {"max_unauthenticated_per_source": 0} if args.direct else None
    if args.reads_rounds:
        if skip:
            print(f"--reads-rounds compares with etcd, which is unavailable: {skip}", file=sys.stderr)
            return 2
        return reads_only(args, settings)
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        root = Path(tmp)
        with LocalCluster(root / "raftpoint", 3, insecure=args.insecure, settings=settings) as cluster:
            cluster.start_all()
            SERVERS = [n.process.pid for n in cluster.nodes]
            ours = asyncio.run(raftpoint_cells(cluster.leader().grpc, cluster.client_tls(), args.seconds,
                                               args.max_ops))
            ours_failover = failover_raftpoint(cluster, args.kills)
        theirs, theirs_failover = {}, None
        if skip is None:
            etcd = EtcdCluster(root, args.insecure)
            try:
                leader = wait_for(lambda: [etcd.leader()] if etcd.leader() is not None else None, "an etcd leader", 30)
                SERVERS = [p.pid for p in etcd.procs]
                theirs = asyncio.run(etcd_cells(etcd.clients[leader[0]], etcd.tls, args.seconds, args.max_ops))
                theirs_failover = failover_etcd(etcd, args.kills)
            finally:
                etcd.close()
    security = "plaintext" if args.insecure else "TLS, client certificates required"
    front = "gRPC on the port itself (--direct)" if args.direct else "behind the connection front"
    print(f"3 members each on 127.0.0.1, {os.cpu_count()} cores, {args.seconds}s per cell, one grpc.aio channel to "
          f"the leader, clients over {security}, {front}")
    print("CommitCheckpoint (unary, then each lane an agent on its own Session stream) vs etcd Put; "
          "CPU = the three servers' CPU ms per operation")
    header = ("in flight", "path", "ops/s", "p50 ms", "p99 ms", "CPU ms/op", "etcd ops/s", "etcd p50 ms",
              "etcd CPU ms/op", "ops/s ratio", "CPU ratio")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for c in CONCURRENCY:
        t = theirs.get(c)
        for path, o in (("unary", ours[c]), ("session", ours["session"][c])):
            tail = ([f"{t['ops_s']:.0f}", f"{t['p50']:.2f}", f"{t['cpu_ms']:.3f}", f"{o['ops_s'] / t['ops_s']:.2f}",
                     f"{o['cpu_ms'] / t['cpu_ms']:.1f}" if t["cpu_ms"] else "-"] if t else ["-"] * 5)
            print(" | ".join([str(c), path, f"{o['ops_s']:.0f}", f"{o['p50']:.2f}", f"{o['p99']:.2f}",
                              f"{o['cpu_ms']:.3f}", *tail])
                  + (f"  (streams refused and resent: {o['refused']})" if o["refused"] else ""))
    print()
    print("Linearizable reads: GetGroup (the group and one agent, ReadIndex) vs etcd Range (one key, linearizable)")
    header = ("in flight", "ops/s", "p50 ms", "p99 ms", "CPU ms/op", "etcd ops/s", "etcd p50 ms", "etcd CPU ms/op",
              "ops/s ratio", "CPU ratio")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for c in CONCURRENCY:
        o, t = ours[f"read{c}"], theirs.get(f"read{c}")
        tail = ([f"{t['ops_s']:.0f}", f"{t['p50']:.2f}", f"{t['cpu_ms']:.3f}", f"{o['ops_s'] / t['ops_s']:.2f}",
                 f"{o['cpu_ms'] / t['cpu_ms']:.1f}" if t["cpu_ms"] else "-"] if t else ["-"] * 5)
        print(" | ".join([str(c), f"{o['ops_s']:.0f}", f"{o['p50']:.2f}", f"{o['p99']:.2f}", f"{o['cpu_ms']:.3f}",
                          *tail]) + (f"  (shed or refused and resent: {o['refused']})" if o["refused"] else ""))
    reads = sum(ours[f"read{c}"]["ops"] for c in CONCURRENCY)
    print(f"log entries the leader committed during those {reads:,} reads: {ours['read_log_entries']}")
    print()
    for c in DEPS_CONCURRENCY:
        d = ours[f"deps{c}"]
        print(f"ReportDependencies, batches of 100, {c} in flight: {d['ops_s'] * 100:,.0f} records/s "
              f"(p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms)")
    def kills(times: list[float]) -> str:
        return f"max {max(times):.2f}s ({', '.join(f'{t:.2f}' for t in times)})"
    if args.kills:
        print(f"leader kill -> next accepted write over {args.kills} kills: raftpoint {kills(ours_failover)}"
              + (f"; etcd {kills(theirs_failover)}" if theirs_failover else ""))
    if skip:
        print(f"etcd skipped: {skip}")
    return 0


def reads_only(args: argparse.Namespace, settings: dict | None) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        root = Path(tmp)
        with LocalCluster(root / "raftpoint", 3, insecure=args.insecure, settings=settings) as cluster:
            cluster.start_all()
            etcd = EtcdCluster(root, args.insecure)
            try:
                their_leader = wait_for(lambda: [etcd.leader()] if etcd.leader() is not None else None,
                                        "an etcd leader", 30)[0]
                leader = cluster.leader()
                followers = ", ".join(str(n.process.pid) for n in cluster.nodes if n is not leader)
                print(f"raftpoint leader pid {leader.process.pid} (followers {followers}), "
                      f"etcd leader pid {etcd.procs[their_leader].pid}", flush=True)
                results = asyncio.run(alternating_reads(
                    (leader.grpc, cluster.client_tls(), [n.process.pid for n in cluster.nodes]),
                    (etcd.clients[their_leader], etcd.tls, [p.pid for p in etcd.procs]), leader.metrics,
                    args.reads_rounds, args.seconds, args.max_ops))
            finally:
                etcd.close()
    security = "plaintext" if args.insecure else "TLS, client certificates required"
    print(f"3 members each on 127.0.0.1, {os.cpu_count()} cores, {args.seconds}s per cell, one grpc.aio channel to "
          f"each leader, clients over {security}")
    print_read_rounds(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
