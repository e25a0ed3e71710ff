"""How many connected agents a 3-node cluster's leader carries: sessions vs the old path.

For each size, a fresh 3-node loopback cluster (coordinator.harness.LocalCluster) and
load-generator processes, each multiplexing its share of the agents with asyncio over
a few channels (at most SESSIONS_PER_CHANNEL calls each, under the server's
per-connection stream cap). Every agent registers, watches its orders and sends a
keepalive every lease/3 (the client's default); groups of GROUP_SIZE agents.
Measured while the agents idle:

- leader CPU % (utime+stime of the leader process over the idle window; 100 % = one core);
- keepalive round trip p50/p99 (in the load generators);
- CommitCheckpoint p50 at 1 in flight, by one more agent on its own session;
- rollback-order delivery p50/p99: in ROLLBACK_GROUPS groups, 9 agents depend on the
  10th, which "fails" (registers again); from sending that call to each dependent's
  order arriving on its stream (the failing Register's own round trip, a Raft write
  whose entry computes the recovery, is shown beside it);
- false FAILED declarations (agents the coordinator declared failed), leader changes.

`--paths session` (one Session per agent, orders pushed) and/or `unary` (unary
Heartbeat + a WatchOrders stream per agent: the old path). The first size where a
target is missed is named: leader CPU < 50 % idle, keepalive p99 < 100 ms, rollback
delivery p99 < 100 ms, 0 false failures, 0 leader changes.

Run: python benchmarks/agents_scale.py [--sizes 100,1000,5000] [--paths session,unary] [--set NAME=VALUE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_client.agent_stream import AsyncSessionStream, keepalive_every  # noqa: E402
from agent_client.connection import AsyncConnection, Connection, CoordinatorUnavailable, Rejected  # noqa: E402
from coordinator import channels  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from _proc import box_busy_seconds, cpu_seconds, total_cpu_seconds  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster, wait_for  # noqa: E402
from coordinator.observability import gc_pauses  # noqa: E402

GROUP_SIZE = 10
LEASE_TTL_S = 10.0
# Each path's keepalive cadence, as the client's: on a session, the open stream holds
# the lease and a keepalive only learns the rollback floor.
KEEPALIVE_S = {path: keepalive_every(path, LEASE_TTL_S) for path in ("session", "unary")}
SESSIONS_PER_CHANNEL = 100
ROLLBACK_GROUPS = 5
IDLE_S = 10.0
COMMIT_S = 3.0
LOADGENS = 2
SECRET = b"s" * 16  # every agent's registration secret (a benchmark needs no unforgeable ones)
REGISTER_CONCURRENCY = 256  # per load generator: registrations in flight at once
GROUP_READS_IN_FLIGHT = 32  # GetGroup calls at once when the driver counts FAILED agents
GROUP_READS_S = 120.0  # and the most time one such pass takes
TARGETS = {"cpu": 50.0, "keepalive_p99_ms": 100.0, "rollback_p99_ms": 100.0}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def names(size: int) -> list[tuple[str, str]]:
    return [(f"g{i // GROUP_SIZE}", f"a{i % GROUP_SIZE}") for i in range(size)]


# ---- the load generator (a process of its own) -------------------------------------

async def _agent(path: str, conn: AsyncConnection, group: str, agent: str, out: dict, stop: asyncio.Event,
                 gate: asyncio.Semaphore) -> None:
    token_holder: dict = {}

    def on_order(order: pb.Order) -> None:
        out["orders"].append((group, agent, order.order_id, time.time()))

    stream: AsyncSessionStream | None = None
    async with gate:  # registrations in bounded waves, as a fleet of agents starting up
        registering = time.monotonic()
        try:
            if path == "session":
                stream = AsyncSessionStream(conn, on_order, lambda code, why: None)
                reg = await stream.call("Register", pb.RegisterRequest(
                    secret=SECRET, request_id=f"reg-{group}-{agent}", group=group, agent_id=agent))
            else:
                reg = await conn.call("AgentService", "Register", pb.RegisterRequest(
                    secret=SECRET, request_id=f"reg-{group}-{agent}", group=group, agent_id=agent))
        except Exception as exc:  # no answer within the client's deadline: this agent never got in
            out["unregistered"] += 1
            out["errors"].append(f"{group}/{agent}: register: {type(exc).__name__}: {str(exc)[:120]}")
            if stream is not None:
                await stream.close()
            return
    token = pb.FencingToken(incarnation=reg.incarnation, secret=SECRET)
    if stream is not None:
        stream.watch(pb.WatchOrdersRequest(group=group, agent_id=agent, token=token))

        async def beat() -> None:
            await stream.call("Heartbeat", pb.HeartbeatRequest(group=group, agent_id=agent, token=token))
    else:
        token_holder["watch"] = asyncio.create_task(_watch(conn, group, agent, token, on_order, stop))

        async def beat() -> None:
            await conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(group=group, agent_id=agent, token=token))
    out["connected"] += 1
    # The longest time this agent's lease went unrenewed as far as it can tell: from the
    # send time of one answered keepalive (its registration first) to the next, or to the
    # refusal that says its incarnation is no longer live. On the unary path only an agent
    # silent for a lease TTL may rightly have been declared failed. A session holds the
    # lease while it is open, and its keepalives are a TTL apart anyway, so there an agent
    # counts as silent only when two answers were more than a TTL plus a keepalive
    # period apart: its frames then went unanswered for a TTL. Any other failure of a
    # session agent is counted false.
    renewed, silence = registering, 0.0
    allowed_silence = LEASE_TTL_S + (KEEPALIVE_S[path] if path == "session" else 0.0)
    try:
        await asyncio.sleep(random.uniform(0, KEEPALIVE_S[path]))
        while not stop.is_set():
            sent, started = time.monotonic(), time.perf_counter()
            try:
                await beat()
                out["rtt"].append((time.time(), time.perf_counter() - started))
                silence, renewed = max(silence, sent - renewed), sent
            except Rejected as exc:  # not live any more: the rollback's replaced agent, or one declared failed
                silence = max(silence, time.monotonic() - renewed)
                out["errors"].append(f"{group}/{agent}: {exc.reason_name}: {exc.reason[:120]}")
                return
            except Exception as exc:  # a slow or changing leader: the next keepalive tries again
                out["errors"].append(f"{group}/{agent}: {type(exc).__name__}: {str(exc)[:120]}")
            try:
                await asyncio.wait_for(stop.wait(), KEEPALIVE_S[path])
            except TimeoutError:
                pass
    finally:
        if silence >= allowed_silence:
            out["silent"].append(f"{group}/{agent}")
        if stream is not None:
            await stream.close()
        if "watch" in token_holder:
            token_holder["watch"].cancel()


async def _watch(conn: AsyncConnection, group: str, agent: str, token: pb.FencingToken, on_order, stop) -> None:
    while not stop.is_set():
        call = conn.stream("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group=group, agent_id=agent, token=token), timeout=30.0)
        try:
            async for order in call:
                on_order(order)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return
            if err.code() in (grpc.StatusCode.UNAVAILABLE,):
                conn.redirect(err)
        await asyncio.sleep(0.2)


async def loadgen(args: argparse.Namespace) -> None:
    endpoints = args.endpoints.split(",")
    mine = [tuple(x.split("/")) for x in args.agents.split(",")] if args.agents else []
    stop = asyncio.Event()
    out: dict = {"connected": 0, "unregistered": 0, "rtt": [], "orders": [], "errors": [], "silent": []}
    gate = asyncio.Semaphore(REGISTER_CONCURRENCY)
    conns = [AsyncConnection(endpoints, deadline=60.0, rpc_timeout=20.0)
             for _ in range(max(1, (len(mine) + SESSIONS_PER_CHANNEL - 1) // SESSIONS_PER_CHANNEL))]
    tasks = []
    for i, (group, agent) in enumerate(mine):
        tasks.append(asyncio.create_task(_agent(args.path, conns[i // SESSIONS_PER_CHANNEL], group, agent, out, stop, gate)))
    ready, stop_file = Path(args.ready), Path(args.stop)
    progress = ready.with_suffix(".progress")  # how far registration got, for a driver that gives up waiting
    while out["connected"] + out["unregistered"] < len(mine) and not stop_file.exists():
        _write_atomically(progress, {"connected": out["connected"], "unregistered": out["unregistered"]})
        await asyncio.sleep(0.5)
    _write_atomically(ready, {"connected": out["connected"], "unregistered": out["unregistered"]})
    while not stop_file.exists():
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait(tasks, timeout=10)
    for c in conns:
        await c.close()
    Path(args.result).write_text(json.dumps(out))


def _write_atomically(path: Path, value: dict) -> None:
    partial = path.with_suffix(".partial")  # renamed into place: the driver never reads half a file
    partial.write_text(json.dumps(value))
    partial.rename(path)


# ---- the driver ----------------------------------------------------------------------



def commit_latency(endpoint_list: list[str], seconds: float) -> list[float]:
    """One more agent commits at 1 in flight on its own session for `seconds`."""
    async def run() -> list[float]:
        conn = AsyncConnection(endpoint_list)
        stream = AsyncSessionStream(conn, lambda o: None, lambda c, w: None)
        reg = await stream.call("Register", pb.RegisterRequest(secret=SECRET, request_id="reg-bench", group="bench",
                                                               agent_id="c"))
        token = pb.FencingToken(incarnation=reg.incarnation, secret=SECRET)
        samples, i, end = [], 0, time.monotonic() + seconds
        while time.monotonic() < end:
            i += 1
            started = time.perf_counter()
            await stream.call("CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"bench-cp-{i}", token=token, checkpoint=pb.CheckpointMeta(
                    group="bench", agent_id="c", index=i, kind=pb.BASIC, blob_uri=f"file:///bench/{i}",
                    sha256="c" * 64, size=200)))
            samples.append(time.perf_counter() - started)
        await stream.close()
        await conn.close()
        return samples
    return asyncio.run(run())


def rollback_setup(conn: Connection, groups: list[str]) -> list[str]:
    """In each group: every agent commits checkpoint 1; a1..a9 then depend on a0's interval 2.
    The groups where that worked: one whose agent was declared failed meanwhile (a false
    failure, counted at the end) is left out of the rollback measurement."""
    ready = []
    for g in groups:
        try:
            _depend_on_a0(conn, g)
            ready.append(g)
        except Rejected as exc:
            print(f"group {g} left out of the rollback measurement: {exc}", file=sys.stderr)
    return ready


def _depend_on_a0(conn: Connection, g: str) -> None:
    for a in range(GROUP_SIZE):
        conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id=f"rb-cp-{g}-{a}", token=pb.FencingToken(incarnation=1, secret=SECRET),
            checkpoint=pb.CheckpointMeta(
                group=g, agent_id=f"a{a}", index=1, kind=pb.BASIC, blob_uri=f"file:///{g}/{a}/1",
                sha256="c" * 64, size=200)))
    for a in range(1, GROUP_SIZE):
        conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
            request_id=f"rb-dep-{g}-{a}", group=g, agent_id=f"a{a}",
            token=pb.FencingToken(incarnation=1, secret=SECRET),
            records=[pb.DependencyRecord(sender="a0", send_interval=2, receiver=f"a{a}", receive_interval=2,
                                         message_id=f"m-{g}-{a}", send_generation=0)]))


def failed_agents(endpoints: list[str], groups: list[str]) -> tuple[set[tuple[str, str]], int]:
    """(group, agent) of every agent the coordinator holds FAILED (groups of GROUP_SIZE:
    one page each), and how many groups could not be read. Each GetGroup is a read
    barrier through the log: read one after another, 1,000 groups on a saturated
    leader took a quarter of an hour. So GROUP_READS_IN_FLIGHT at once (their barriers
    share Raft batches), and the pass ends at GROUP_READS_S, whatever is left unread."""
    async def read_all() -> tuple[set[tuple[str, str]], int]:
        conn = AsyncConnection(endpoints)
        gate = asyncio.Semaphore(GROUP_READS_IN_FLIGHT)
        failed: set[tuple[str, str]] = set()

        async def read(group: str) -> None:
            async with gate:
                reply = await conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=group))
            failed.update((group, a.agent_id) for a in reply.agents if a.state == pb.AGENT_FAILED)

        tasks = [asyncio.create_task(read(g)) for g in groups]
        try:
            done, pending = await asyncio.wait(tasks, timeout=GROUP_READS_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            unread = len(pending) + sum(1 for task in done if task.exception() is not None)
        finally:
            await conn.close()
        return failed, unread
    return asyncio.run(read_all())


def run_size(size: int, path: str, root: Path, settings: dict[str, str]) -> dict:
    """One size on a fresh cluster (TLS, client certificates, as the harness runs it):
    every client of the run, the load generators included, reads the cluster's CA and
    certificate from the RAFTPOINT_* variables, as an agent deployment does."""
    # Every agent of the run connects from 127.0.0.1, thousands at once: the per-address
    # share of unauthenticated connections is raised to let them all handshake together.
    cluster = LocalCluster(root / f"{path}-{size}", 3, settings={
        "max_rpcs": 4 * size + 1000, "max_connections": 4096, "max_unauthenticated_per_source": 4096, **settings})
    try:
        cluster.start_all()
        with channels.environment(cluster.client_tls()):
            return _measure(size, path, root, cluster)
    finally:
        cluster.close()


def _measure(size: int, path: str, root: Path, cluster: LocalCluster) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        leader = cluster.leader()
        endpoints = [leader.grpc] + [n.grpc for n in cluster.nodes if n is not leader]
        conn = Connection(endpoints, deadline=60)
        groups = sorted({g for g, _ in names(size)}, key=lambda g: int(g[1:]))
        for g in [*groups, "bench"]:
            conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                request_id=f"cg-{g}", spec=pb.GroupSpec(group=g, mode=pb.CIC_BCS, lease_ttl_s=LEASE_TTL_S)))
        term0 = conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest()).node.term
        everyone = names(size)
        shares = [everyone[i::LOADGENS] for i in range(LOADGENS)]
        files = []
        connect_started = time.monotonic()
        for i, share in enumerate(shares):
            f = {k: root / f"{path}-{size}-{i}.{k}" for k in ("ready", "stop", "result", "log")}
            files.append(f)
            with open(f["log"], "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--loadgen", "--path", path, "--endpoints", ",".join(endpoints),
                     "--agents", ",".join(f"{g}/{a}" for g, a in share), "--ready", str(f["ready"]),
                     "--stop", str(f["stop"]), "--result", str(f["result"])], stdout=log, stderr=subprocess.STDOUT))
        try:
            wait_for(lambda: all(f["ready"].exists() for f in files) or any(p.poll() is not None for p in procs),
                     "agents to connect", 120 + size / 50, 0.2)
        except TimeoutError:
            return _gave_up(size, path, time.monotonic() - connect_started, files, procs, conn, term0)
        if not all(f["ready"].exists() for f in files):
            raise RuntimeError("a load generator exited: " + files[0]["log"].read_text()[-2000:])
        connect_s = time.monotonic() - connect_started
        unregistered = sum(json.loads(f["ready"].read_text())["unregistered"] for f in files)
        time.sleep(KEEPALIVE_S[path])  # every agent's keepalive phase under way
        pid = leader.process.pid
        # The load generators share the machine: their CPU (and the whole box's) says
        # whether a keepalive's round trip was the leader's or the machine's.
        loadgens = [p.pid for p in procs]
        idle_from, cpu0, gen0, box0 = time.time(), cpu_seconds(pid), total_cpu_seconds(loadgens), box_busy_seconds()
        time.sleep(IDLE_S)
        idle_to, cpu1, gen1, box1 = time.time(), cpu_seconds(pid), total_cpu_seconds(loadgens), box_busy_seconds()
        cpu = 100 * (cpu1 - cpu0) / (idle_to - idle_from)
        loadgen_cpu = 100 * (gen1 - gen0) / (idle_to - idle_from)
        box_cpu = 100 * (box1 - box0) / (idle_to - idle_from) / (os.cpu_count() or 1)
        commits = commit_latency(endpoints, COMMIT_S)
        # The rollback is measured in groups none of whose agents was declared failed
        # (any that was is a false failure, counted at the end).
        already, _ = failed_agents(endpoints, groups)
        victims = [g for g in groups if not any(fg == g for fg, _ in already)][:ROLLBACK_GROUPS]
        victims = rollback_setup(conn, victims)
        failed_at, answered_at, fail_calls = {}, {}, []
        for g in victims:
            failed_at[g] = time.time()
            started = time.perf_counter()
            conn.call("AgentService", "Register", pb.RegisterRequest(secret=SECRET, request_id=f"fail-{g}", group=g,
                                                                     agent_id="a0"))
            fail_calls.append(time.perf_counter() - started)
            answered_at[g] = failed_at[g] + fail_calls[-1]
        time.sleep(2.0)  # orders arrive within this (or count as missing)
        failed, groups_unread = failed_agents(endpoints, groups)  # read while every agent still sends keepalives
        for f in files:
            f["stop"].touch()
        for p in procs:
            p.wait(60)
        results = [json.loads(f["result"].read_text()) for f in files]
        rtts = [r for res in results for t, r in res["rtt"] if idle_from <= t <= idle_to]
        first_order: dict[tuple[str, str], float] = {}
        for res in results:
            for g, a, _, at in res["orders"]:
                if g in failed_at and a != "a0":
                    first_order[(g, a)] = min(first_order.get((g, a), at), at)
        delivery = [at - failed_at[g] for (g, _), at in first_order.items()]
        after_answer = [at - answered_at[g] for (g, _), at in first_order.items()]
        missing = len(victims) * (GROUP_SIZE - 1) - len(delivery)
        silent = {tuple(name.split("/")) for res in results for name in res["silent"]}
        st = conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest())
        leader_changes = st.node.term - term0
        errors = [e for res in results for e in res["errors"]
                  if not any(e.startswith(f"{g}/a0:") for g in failed_at)]  # the failed agents' own fence
        conn.close()
        return {"size": size, "path": path, "connect_s": connect_s, "unregistered": unregistered, "cpu": cpu,
                "loadgen_cpu": loadgen_cpu, "box_cpu": box_cpu,
                "ka_p50_ms": 1000 * pct(rtts, 0.5), "ka_p99_ms": 1000 * pct(rtts, 0.99), "keepalives": len(rtts),
                "commit_p50_ms": 1000 * statistics.median(commits) if commits else float("nan"),
                "fail_call_ms": 1000 * statistics.median(fail_calls) if fail_calls else float("nan"),
                "rollback_groups": len(victims),
                "rb_p50_ms": 1000 * pct(delivery, 0.5), "rb_p99_ms": 1000 * pct(delivery, 0.99),
                "rb_after_answer_p99_ms": 1000 * pct(after_answer, 0.99), "rb_missing": missing,
                "false_failed": len(failed - silent), "failed_after_silence": len(failed & silent),
                "leader_changes": leader_changes, "groups_unread": groups_unread,
                "errors": len(errors), "error_sample": errors[:3]}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def _gave_up(size: int, path: str, waited_s: float, files: list[dict], procs: list[subprocess.Popen],
             conn: Connection, term0: int) -> dict:
    """The row of a size whose agents did not all register in time: how many did, and
    whether leadership moved meanwhile; nothing else was measured."""
    connected = 0
    for f in files:
        source = f["ready"] if f["ready"].exists() else f["ready"].with_suffix(".progress")
        if source.exists():
            connected += json.loads(source.read_text())["connected"]
        f["stop"].touch()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
    try:
        leader_changes = conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest()).node.term - term0
    except (Rejected, CoordinatorUnavailable):
        leader_changes = -1  # not known: no leader answered
    conn.close()
    nan = float("nan")
    return {"size": size, "path": path, "connect_s": waited_s, "unregistered": size - connected, "cpu": nan,
            "loadgen_cpu": nan, "box_cpu": nan, "ka_p50_ms": nan, "ka_p99_ms": nan, "keepalives": 0,
            "commit_p50_ms": nan, "fail_call_ms": nan, "rollback_groups": 0, "rb_p50_ms": nan, "rb_p99_ms": nan,
            "rb_after_answer_p99_ms": nan, "rb_missing": 0, "false_failed": 0, "failed_after_silence": 0,
            "leader_changes": leader_changes, "errors": 0, "error_sample": [], "gave_up": True}


def degraded(row: dict) -> list[str]:
    if row.get("gave_up"):
        return [f"not all agents registered within {row['connect_s']:.0f} s"]
    why = []
    if row["cpu"] >= TARGETS["cpu"]:
        why.append("leader CPU")
    if not row["ka_p99_ms"] < TARGETS["keepalive_p99_ms"]:
        why.append("keepalive p99")
    if not row["rb_p99_ms"] < TARGETS["rollback_p99_ms"] or row["rb_missing"]:
        why.append("rollback delivery")
    if row["unregistered"]:
        why.append("agents that never registered")
    if row["false_failed"]:
        why.append("false failures")
    if row["leader_changes"]:
        why.append("leader changes")
    if row.get("groups_unread"):
        why.append(f"{row['groups_unread']} groups unread (false failures not counted in them)")
    return why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--paths", default="session,unary")
    parser.add_argument("--baseline-size", type=int, default=1000, help="the size the unary path is measured at")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a node setting for every cluster, e.g. raft_min_timeout=1.0")
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    for name in ("path", "endpoints", "agents", "ready", "stop", "result"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loadgen:
        # Thousands of sessions in one process: the collector tuned as the nodes tune it,
        # so the load generator's own pauses are not counted as keepalive round trips.
        gc_pauses.tune_for_serving()
        asyncio.run(loadgen(args))
        return
    runs = []
    paths = args.paths.split(",")
    for size in [int(s) for s in args.sizes.split(",")]:
        if "session" in paths:
            runs.append(("session", size))
    if "unary" in paths:
        runs.append(("unary", args.baseline_size))
    rows = []
    with tempfile.TemporaryDirectory(prefix="agents-scale-") as tmp:
        for path, size in runs:
            row = run_size(size, path, Path(tmp), dict(s.split("=", 1) for s in args.set))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    header = ("path", "agents", "connect s", "never registered", "leader CPU %",
              "load generators CPU %", "machine busy %", "keepalive p50/p99 ms", "commit p50 ms",
              "failing Register ms", "rollback p50/p99 ms", "after the answer p99 ms", "missing", "false FAILED",
              "FAILED after a TTL of silence", "leader changes", "errors", "degraded")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        print(" | ".join([r["path"], str(r["size"]), f"{r['connect_s']:.1f}", str(r["unregistered"]), f"{r['cpu']:.0f}",
                          f"{r['loadgen_cpu']:.0f}", f"{r['box_cpu']:.0f}",
                          f"{r['ka_p50_ms']:.1f}/{r['ka_p99_ms']:.1f}", f"{r['commit_p50_ms']:.1f}",
                          f"{r['fail_call_ms']:.1f}", f"{r['rb_p50_ms']:.1f}/{r['rb_p99_ms']:.1f}",
                          f"{r['rb_after_answer_p99_ms']:.1f}", str(r["rb_missing"]), str(r["false_failed"]), str(r["failed_after_silence"]),
                          str(r["leader_changes"]), str(r["errors"]), ", ".join(degraded(r)) or "-"]))
    first = next((r for r in rows if r["path"] == "session" and degraded(r)), None)
    print(f"first session size that degrades: {first['size'] if first else 'none measured'}"
          + (f" ({', '.join(degraded(first))})" if first else ""))


if __name__ == "__main__":
    main()
