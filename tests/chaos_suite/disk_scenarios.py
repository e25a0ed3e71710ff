"""Disk-fault scenarios against a 3-node LocalCluster whose data dirs are LoopDisks.

Each scenario runs as its own process inside a private mount namespace, so no mount
or loop device outlives it even if it is killed; the tests start it with
chaos.disk.private_mount_namespace_argv and judge the JSON observations it prints:

    python -m tests.chaos_suite.disk_scenarios power-loss --root DIR [--skip-fsync]
    python -m tests.chaos_suite.disk_scenarios disk-full --root DIR --victim follower|leader
    python -m tests.chaos_suite.disk_scenarios slow-disk --root DIR

Every wait has a deadline and every load is bounded in count and time.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import grpc

from chaos import node as chaos_node
from chaos.disk import BLKIO_ROOT, LoopDisk, private_mount_namespace_argv
from coordinator.harness.local_cluster import LocalCluster, NodeProcess, wait_for
from tests.support.metrics import scrape
from tests.support.cluster import FAST, Client
from tests.support.tls import clients_trust

REPO = Path(__file__).resolve().parents[2]
SCENARIO_TIMEOUT_S = 120
DISK_MB = 64
GROUP = "g"
WRITERS = 4
ACKED_BEFORE_CUT = 60  # acknowledged writes before the power goes
LOAD_LIMIT_S = 20.0
POST_WRITES = 5
RECOVERY_S = 15.0  # a restarted cluster elects a leader and converges within this
CHECK_DEADLINE_S = 5.0
LOG_TAIL = 6
VICTIM_EXIT_S = 30.0  # how long a node whose disk is full may take to stop
COMPACT_EVERY = 40  # entries: compactions (snapshot + journal rewrite) happen during the load too


def run_in_namespace(root: Path, scenario: str, *args: str) -> dict:
    """Run one scenario in its own private mount namespace; its JSON observations."""
    argv = [sys.executable, "-m", "tests.chaos_suite.disk_scenarios", scenario, "--root", str(root), *args]
    done = subprocess.run(private_mount_namespace_argv(argv), cwd=REPO, capture_output=True, text=True,
                          timeout=SCENARIO_TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"scenario {scenario} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextmanager
def cluster_on_disks(root: Path, *, skip_fsync: bool = False,
                     settings: dict[str, object] = FAST) -> Iterator[tuple[LocalCluster, list[LoopDisk]]]:
    """Three nodes, node i's data dir being the mount point of its own LoopDisk."""
    program = (lambda i: chaos_node.program({}, "skip-fsync")) if skip_fsync else None
    with ExitStack() as stack:
        disks = []
        for i in range(3):
            disk = LoopDisk(root / "images" / f"node{i}.img", root / "cluster" / f"node{i}", DISK_MB)
            stack.callback(disk.close)
            disk.create()
            disk.mount()
            disks.append(disk)
        cluster = stack.enter_context(LocalCluster(root / "cluster", 3, settings=settings, program=program))
        stack.enter_context(clients_trust(cluster))
        cluster.start_all()
        cluster.leader()
        yield cluster, disks


class Writers:
    """One thread per agent committing checkpoints 1, 2, ... until stopped (or the
    count/time bound); records what the cluster acknowledged."""

    def __init__(self, cluster: LocalCluster, agents: list[str], max_per_agent: int = 2000) -> None:
        self.acked: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._end = time.monotonic() + LOAD_LIMIT_S
        self._threads = [threading.Thread(target=self._run, args=(Client(cluster, deadline=2.0), a, max_per_agent),
                                          daemon=True) for a in agents]

    def start(self) -> "Writers":
        for t in self._threads:
            t.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self, client: Client, agent: str, limit: int) -> None:
        for index in range(1, limit + 1):
            if self._stop.is_set() or time.monotonic() > self._end:
                return
            try:
                client.commit(agent, index)
            except Exception:  # outcome unknown (cluster down, timeout): not acknowledged
                continue
            with self._lock:
                self.acked.add((agent, index))

    def stop(self) -> set[tuple[str, int]]:
        self._stop.set()
        for t in self._threads:
            t.join(LOAD_LIMIT_S)
        with self._lock:
            return set(self.acked)


def setup_agents(client: Client, count: int) -> list[str]:
    client.create_group(GROUP)
    agents = [f"a{i}" for i in range(count)]
    for agent in agents:
        client.register(agent)
    return agents


def missing(client: Client, acked: set[tuple[str, int]]) -> list[tuple[str, int]]:
    listed = {(agent, i) for agent in {a for a, _ in acked} for i in client.checkpoints(GROUP, agent)}
    return sorted(acked - listed)


def converged(cluster: LocalCluster, timeout: float) -> str | None:
    try:
        return cluster.converged(timeout)
    except TimeoutError:
        return None


def log_tail(cluster: LocalCluster, node: NodeProcess) -> list[str]:
    return (cluster.root / f"node{node.index}.log").read_text(errors="replace").splitlines()[-LOG_TAIL:]


def follower_of(cluster: LocalCluster) -> NodeProcess:
    leader = cluster.leader()
    return next(n for n in cluster.nodes if n is not leader)


# ---- power loss of every node at once ------------------------------------------------

def power_loss(root: Path, skip_fsync: bool) -> dict:
    settings = {**FAST, "compaction_min_entries": COMPACT_EVERY}
    with cluster_on_disks(root, skip_fsync=skip_fsync, settings=settings) as (cluster, disks):
        client = Client(cluster)
        agents = setup_agents(client, WRITERS)
        writers = Writers(cluster, agents).start()
        wait_for(lambda: writers.count() >= ACKED_BEFORE_CUT, "acknowledged writes before the cut", LOAD_LIMIT_S)
        # The power goes everywhere at once, mid-load: freeze every node, shut every
        # file system down (unsynced data is gone from here on), then kill.
        for node in cluster.nodes:
            cluster.signal(node.index, signal.SIGSTOP)
        for disk in disks:
            disk.power_cut()
        for node in cluster.nodes:
            cluster.kill(node.index)
        acked = writers.stop()
        for disk in disks:
            disk.power_cycle()
        for node in cluster.nodes:
            cluster.start(node.index)
        return {"acked": len(acked), **check_after_restart(cluster, agents, acked)}


def check_after_restart(cluster: LocalCluster, agents: list[str], acked: set[tuple[str, int]]) -> dict:
    """Bounded checks of a restarted cluster: a broken one must fail them quickly."""
    seen: dict = {"missing": [], "unreadable": None, "post_writes": POST_WRITES, "post_writes_ok": 0,
                  "converged_digest": None}
    try:
        cluster.leader(RECOVERY_S)
        client = Client(cluster, deadline=CHECK_DEADLINE_S)
        seen["missing"] = missing(client, acked)
        for k in range(POST_WRITES):
            client.commit(agents[0], 100_000 + k)
            seen["post_writes_ok"] += 1
    except (TimeoutError, grpc.RpcError) as exc:  # no leader, or it cannot answer
        seen["unreadable"] = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
    else:
        seen["converged_digest"] = converged(cluster, RECOVERY_S)
    return {**seen, "statuses": _statuses(cluster)}


def _statuses(cluster: LocalCluster) -> dict[int, dict]:
    return {i: {"role": s.role, "applied_index": s.applied_index, "digest": s.content_digest}
            for i, s in cluster.statuses().items()}


# ---- one node's disk fills up ------------------------------------------------------

def disk_full(root: Path, victim_role: str) -> dict:
    with cluster_on_disks(root) as (cluster, disks):
        client = Client(cluster)
        agents = setup_agents(client, 1)
        acked: set[tuple[str, int]] = set()
        for i in range(1, 6):
            client.commit(agents[0], i)
            acked.add((agents[0], i))
        cluster.converged(30)
        victim = cluster.leader() if victim_role == "leader" else follower_of(cluster)
        disks[victim.index].fill(leave_bytes=0)
        full_free = disks[victim.index].free_bytes()
        # The others keep serving while the victim's disk is full.
        started = time.monotonic()
        for i in range(6, 46):
            client.commit(agents[0], i)
            acked.add((agents[0], i))
        serving_s = time.monotonic() - started
        # Under a loaded machine the victim may first be deposed and lose elections before an
        # AppendEntries from the new leader makes it write (and stop); the writes go on
        # meanwhile, as a client's would, so there is something new for it to store.
        victim_exit, more = _wait_exit_while_writing(victim, VICTIM_EXIT_S, client, agents[0], first=46)
        acked |= more
        # A node that cannot store entries must not count toward a majority: with the
        # only healthy peer gone, a write must not be acknowledged.
        third = next(n for n in cluster.nodes if n is not victim and n is not cluster.leader())
        cluster.kill(third.index)
        try:
            Client(cluster, deadline=4.0).commit(agents[0], 1000)
            acked_without_majority = True
        except Exception:
            acked_without_majority = False
        cluster.start(third.index)
        # Heal: free the space, restart the victim; it catches up.
        disks[victim.index].unfill()
        cluster.kill(victim.index)
        cluster.start(victim.index)
        cluster.leader(30)
        for i in range(1001, 1006):
            client.commit(agents[0], i)
            acked.add((agents[0], i))
        digest = converged(cluster, 30)
        return {"victim_role": victim_role, "free_bytes_when_full": full_free, "serving_s": serving_s,
                "victim_exit": victim_exit, "victim_log": log_tail(cluster, victim),
                "acked_without_majority": acked_without_majority, "acked": len(acked),
                "missing": missing(client, acked), "converged_digest": digest, "statuses": _statuses(cluster)}


def _wait_exit_while_writing(node: NodeProcess, timeout: float, client: Client, agent: str,
                             first: int) -> tuple[int | None, set[tuple[str, int]]]:
    """The node's exit code (None if still running at the deadline), and the writes
    acknowledged meanwhile: one at a time, at most one per 0.1 s."""
    acked: set[tuple[str, int]] = set()
    end = time.monotonic() + timeout
    i = first
    while node.alive and time.monotonic() < end:
        client.commit(agent, i)
        acked.add((agent, i))
        i += 1
        time.sleep(0.1)
    return _wait_exit(node, max(0.0, end - time.monotonic())), acked


def _wait_exit(node: NodeProcess, timeout: float) -> int | None:
    try:
        return node.process.wait(timeout)
    except Exception:
        return None


# ---- one node's disk is slow ---------------------------------------------------------

SLOW_BPS = 1 << 20
SLOW_IOPS = 20
PHASE_MIN_S = 1.5
PHASE_FSYNCS = 5


def slow_disk(root: Path) -> dict:
    with cluster_on_disks(root) as (cluster, disks):
        client = Client(cluster)
        agents = setup_agents(client, 1)
        victim = follower_of(cluster)
        next_index = iter(range(1, 100_000))
        phases = {}

        def phase(name: str) -> None:
            """Write for a while and until the victim fsynced its journal a few times."""
            before = scrape(victim.metrics)
            started = time.monotonic()
            latencies = []

            def enough() -> bool:
                t0 = time.monotonic()
                client.commit(agents[0], next(next_index))
                latencies.append(time.monotonic() - t0)
                done = scrape(victim.metrics).get("raftpoint_journal_fsync_seconds_count", 0)
                return (time.monotonic() - started >= PHASE_MIN_S
                        and done - before.get("raftpoint_journal_fsync_seconds_count", 0) >= PHASE_FSYNCS)
            wait_for(enough, f"{name}: writes and victim fsyncs", LOAD_LIMIT_S, 0)
            after = scrape(victim.metrics)
            count = after["raftpoint_journal_fsync_seconds_count"] - before.get("raftpoint_journal_fsync_seconds_count", 0)
            total = after["raftpoint_journal_fsync_seconds_sum"] - before.get("raftpoint_journal_fsync_seconds_sum", 0)
            latencies.sort()
            phases[name] = {"fsyncs": count, "fsync_mean_s": total / count, "writes": len(latencies),
                            "write_p50_s": latencies[len(latencies) // 2], "term": after["raftpoint_raft_term"]}

        phase("normal")
        disks[victim.index].throttle([victim.process.pid], SLOW_BPS, SLOW_IOPS)
        phase("throttled")
        disks[victim.index].unthrottle([victim.process.pid])
        phase("healed")
        digest = converged(cluster, 30)
        return {"phases": phases, "converged_digest": digest, "statuses": _statuses(cluster)}


# ---- the LoopDisk primitives on their own ---------------------------------------------

def loop_disk(root: Path) -> dict:
    seen: dict = {}
    disk = LoopDisk(root / "disk.img", root / "mnt", 32)
    with disk:
        disk.create()
        disk.mount()
        seen["device"] = disk.device
        _write(disk.mountpoint / "synced", b"s" * 10_000, sync=True)
        _write(disk.mountpoint / "unsynced", b"u" * 10_000, sync=False)
        os.sync()  # everything so far reaches the disk...
        _write(disk.mountpoint / "late", b"l" * 10_000, sync=False)  # ...but this, written after, does not
        disk.power_cut()
        seen["write_after_cut"] = _errno_of(lambda: _write(disk.mountpoint / "x", b"x", sync=False))
        disk.power_cycle()
        seen["files_after_cycle"] = sorted(p.name for p in disk.mountpoint.iterdir() if p.name != "lost+found")
        seen["synced_intact"] = (disk.mountpoint / "synced").read_bytes() == b"s" * 10_000
        disk.fill(64 << 10)
        seen["free_after_fill"] = disk.free_bytes()
        seen["write_1mib_when_full"] = _errno_of(lambda: _write(disk.mountpoint / "big", b"b" * (1 << 20), sync=True))
        disk.unfill()
        seen["free_after_unfill"] = disk.free_bytes()
        disk.throttle([os.getpid()], 1 << 20, 20)
        seen["cgroup_while_throttled"] = _own_blkio_cgroup()
        disk.unthrottle([os.getpid()])
        seen["cgroup_after_unthrottle"] = _own_blkio_cgroup()
    disk.close()  # a second close is harmless
    seen["loop_devices_left"] = subprocess.run(["losetup", "--associated", str(disk.image)], capture_output=True,
                                               text=True).stdout.strip()
    seen["cgroups_left"] = sorted(p.name for p in BLKIO_ROOT.glob("raftpoint-disk-*"))
    return seen


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _errno_of(action) -> str | None:  # type: ignore[no-untyped-def]
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return None


def _own_blkio_cgroup() -> str:
    line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if ":blkio:" in x)
    return line.split(":", 2)[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["power-loss", "disk-full", "slow-disk", "loop-disk"])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--skip-fsync", action="store_true", help="power-loss: nodes whose fsyncs do nothing")
    parser.add_argument("--victim", choices=["follower", "leader"], default="follower", help="disk-full: whose disk")
    args = parser.parse_args(argv)
    if args.scenario == "power-loss":
        result = power_loss(args.root, args.skip_fsync)
    elif args.scenario == "disk-full":
        result = disk_full(args.root, args.victim)
    elif args.scenario == "slow-disk":
        result = slow_disk(args.root)
    else:
        result = loop_disk(args.root)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
