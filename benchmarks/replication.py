"""Replication throughput and latency: raw pysyncobj vs raftpoint's state machine on LMDB.

Three node processes on 127.0.0.1 per configuration. The leader process keeps N
proposals in flight (each completion issues the next) for a bounded time and
count, then reports writes/s and latency percentiles. "raw" is a pysyncobj
counter with the same Raft settings and a ~200-byte argument; "raftpoint" applies
CommitCheckpoint log entries through CoordinatorNode with group commit to LMDB
(sync on). Run: python benchmarks/replication.py [--seconds 3] [--concurrency 1,8,32,128]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator.cli.local_cluster import free_ports, wait_for  # noqa: E402

PAYLOAD = b"x" * 200
AGENTS = 128


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


# ---- node side -------------------------------------------------------------------

def make_raw(cfg):
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Counter(SyncObj):
        def __init__(self) -> None:
            self.value = 0
            conf = SyncObjConf(password=cfg.password(), autoTick=True, autoTickPeriod=cfg.auto_tick_period,
                               appendEntriesUseBatch=cfg.append_entries_batch, appendEntriesPeriod=cfg.append_entries_period,
                               raftMinTimeout=cfg.raft_min_timeout, raftMaxTimeout=cfg.raft_max_timeout,
                               journalFile=str(Path(cfg.data_dir) / "raw.journal"), dynamicMembershipChange=True,
                               logCompactionMinEntries=cfg.compaction_min_entries,
                               fullDumpFile=str(Path(cfg.data_dir) / "raw.dump"))
            super().__init__(cfg.raft_address, [p.raft for p in cfg.peer_list()], conf)

        @replicated
        def incr(self, data: bytes) -> int:
            self.value += 1
            return self.value

    node = Counter()
    return node, lambda i, cb: node.incr(PAYLOAD, callback=lambda r, e: cb(e == 0)), node._isLeader


def make_ours(cfg):
    from coordinator.api.v1 import coordinator_pb2 as pb
    from coordinator.api.v1 import log_pb2
    from coordinator.replication.node import CoordinatorNode
    from coordinator.storage import open_store

    node = CoordinatorNode(cfg, open_store("lmdb", Path(cfg.data_dir) / "state"))
    counters: dict[int, int] = {}

    def entry(rid: str, **command) -> bytes:
        return log_pb2.LogEntry(request_id=rid, proposed_at=time.time(), **command).SerializeToString()

    def setup() -> None:
        done = threading.Semaphore(0)
        node.propose(entry("bench-group", create_group=pb.CreateGroupRequest(request_id="bench-group", spec=pb.GroupSpec(
            group="bench", mode=pb.CIC_BCS, lease_ttl_s=3600))), lambda r, e: done.release())
        done.acquire(timeout=30)
        for a in range(AGENTS):
            node.propose(entry(f"bench-reg-{a}", register=pb.RegisterRequest(
                request_id=f"bench-reg-{a}", group="bench", agent_id=f"a{a}")), lambda r, e: done.release())
        for _ in range(AGENTS):
            done.acquire(timeout=30)

    def propose(proposer: int, cb) -> None:
        index = counters[proposer] = counters.get(proposer, 0) + 1
        rid = f"c-{proposer}-{index}"
        data = entry(rid, commit_checkpoint=pb.CommitCheckpointRequest(
            request_id=rid, token=pb.FencingToken(incarnation=1),
            checkpoint=pb.CheckpointMeta(group="bench", agent_id=f"a{proposer}", index=index, kind=pb.BASIC,
                                         blob_uri=f"file:///blobs/a{proposer}/{index}", sha256="ab" * 32,
                                         size=4096, config_hash="cfg-1")))
        node.propose(data, lambda r, e: cb(e is None))

    node.bench_setup = setup
    return node, propose, node.is_leader


def load(propose, concurrency: int, seconds: float, max_ops: int) -> dict:
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    end = time.monotonic() + seconds
    finished = threading.Event()
    active = [concurrency]

    def issue(proposer: int) -> None:
        started = time.perf_counter()

        def done(ok: bool) -> None:
            nonlocal failures
            with lock:
                if ok:
                    latencies.append(time.perf_counter() - started)
                else:
                    failures += 1
                more = time.monotonic() < end and len(latencies) + failures < max_ops
                if not more:
                    active[0] -= 1
                    if active[0] == 0:
                        finished.set()
            if more:
                issue(proposer)

        propose(proposer, done)

    t0 = time.perf_counter()
    for p in range(concurrency):
        issue(p)
    finished.wait(seconds + 30)
    elapsed = time.perf_counter() - t0
    return {"concurrency": concurrency, "ops": len(latencies), "failures": failures, "ops_s": len(latencies) / elapsed,
            "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3}


def serve(args: argparse.Namespace) -> None:
    from coordinator import config

    cfg = config.load(env={}, flags={"raft_address": args.raft, "peers": tuple(args.peers.split(",")),
                                     "data_dir": args.data_dir, "raft_password": "bench", "auto_tick_period": args.tick,
                                     "compaction_min_entries": 1_000_000,
                                     "append_entries_batch": args.batch, "append_entries_period": args.period})
    node, propose, is_leader = (make_raw if args.kind == "raw" else make_ours)(cfg)
    done_file, result_file = Path(args.done), Path(args.result)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not done_file.exists():
            if is_leader():
                break
            time.sleep(0.05)
        if is_leader() and not done_file.exists():
            time.sleep(0.5)  # let followers connect before measuring
            if hasattr(node, "bench_setup"):
                node.bench_setup()
            rows = [load(propose, c, args.seconds, args.max_ops) for c in args.concurrency]
            result_file.write_text(json.dumps(rows))
            done_file.touch()
        else:
            wait_for(done_file.exists, "the leader to finish", 600, 0.1)
    finally:
        node.destroy()


# ---- driver ----------------------------------------------------------------------

def run_kind(kind: str, args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as tmp:
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        done, result = Path(tmp) / "done", Path(tmp) / "result.json"
        procs = []
        for i, addr in enumerate(addrs):
            data = Path(tmp) / f"n{i}"
            data.mkdir()
            procs.append(subprocess.Popen([sys.executable, __file__, "--serve", "--kind", kind, "--raft", addr,
                                           "--peers", ",".join(a for a in addrs if a != addr), "--data-dir", str(data),
                                           "--done", str(done), "--result", str(result), "--seconds", str(args.seconds),
                                           "--max-ops", str(args.max_ops), "--tick", str(args.tick),
                                           "--batch", str(args.batch).lower(), "--period", str(args.period),
                                           "--concurrency", ",".join(map(str, args.concurrency))]))
        try:
            budget = 60 + len(args.concurrency) * (args.seconds + 30)
            wait_for(done.exists, f"{kind} benchmark", budget, 0.2)
            return json.loads(result.read_text())
        finally:
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--max-ops", type=int, default=30_000, help="operations per cell at most")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 128])
    parser.add_argument("--tick", type=float, default=0.005, help="pysyncobj autoTickPeriod")
    parser.add_argument("--batch", type=lambda s: s.lower() == "true", default=False,
                        help="appendEntriesUseBatch (true/false)")
    parser.add_argument("--period", type=float, default=0.05, help="appendEntriesPeriod seconds")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    for name in ("kind", "raft", "peers", "data-dir", "done", "result"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return 0
    results = {kind: run_kind(kind, args) for kind in ("raw", "raftpoint")}
    print(f"3-node loopback cluster, {os.cpu_count()} cores, autoTickPeriod {args.tick}s, {args.seconds}s per cell")
    print(f"{'in flight':>9} | {'raw ops/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'ours ops/s':>10} {'p50 ms':>7} "
          f"{'p99 ms':>7} | {'ours/raw':>8}")
    for raw, ours in zip(results["raw"], results["raftpoint"]):
        print(f"{raw['concurrency']:>9} | {raw['ops_s']:>9.0f} {raw['p50_ms']:>7.2f} {raw['p99_ms']:>7.2f} | "
              f"{ours['ops_s']:>10.0f} {ours['p50_ms']:>7.2f} {ours['p99_ms']:>7.2f} | {ours['ops_s'] / raw['ops_s']:>8.2f}")
        if raw["failures"] or ours["failures"]:
            print(f"          failures: raw {raw['failures']}, raftpoint {ours['failures']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
