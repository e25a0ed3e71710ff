"""Replication throughput and latency: raw pysyncobj vs raftpoint's state machine on LMDB.

Three node processes on 127.0.0.1 per configuration (benchmarks/_cluster.py). The
leader process keeps N proposals in flight (each completion issues the next) for a
bounded time and count per cell, then reports writes/s and latency percentiles.

- raw: a pysyncobj counter with the same Raft settings, journal on disk, password
  set, and a ~200-byte argument: the ceiling of our replication path.
- raw+j: the same counter with our journal (coordinator/replication/journal.py):
  conflict-aware, and durable like ours (flushed before every Raft message). Stock
  pysyncobj truncates and re-sends acknowledged entries under pipelined load, which
  slows "raw" down, and never fsyncs its journal; this column shows the cost of our
  apply path on equal Raft durability.
- ours: CoordinatorNode applying CommitCheckpoint entries with group commit to LMDB
  (sync on); a proposal counts as done when the node answers it (committed on a
  majority's journals and applied; the store commits after, in the background), and
  a rejected command counts as a failure, not a write.

Run: python benchmarks/replication.py [--quick] [--seconds 3] [--concurrency 1,8,32,128]
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402

PAYLOAD = b"x" * 200
KINDS = ("raw", "raw+j", "ours")
# A proposer issues one proposal and calls back done(error) with None on success.
Propose = Callable[[int, Callable[[str | None], None]], None]


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


# ---- node side -------------------------------------------------------------------

def make_raw(cfg, conflict_aware_journal: bool):
    from pysyncobj import SyncObj, SyncObjConf, replicated

    from pysyncobj.transport import TCPTransport
    transport = TCPTransport
    journal = str(Path(cfg.data_dir) / "raw.journal")
    if conflict_aware_journal:
        from coordinator.replication import journal_format, pysyncobj_adapter
        pysyncobj_adapter.install()
        pysyncobj_adapter.use_journal_key(journal, journal_format.record_key(cfg.password()))
        transport = pysyncobj_adapter.FlushingTransport

    class Counter(SyncObj):
        def __init__(self) -> None:
            self.value = 0
            conf = SyncObjConf(password=cfg.password(), bindAddress=cfg.raft_address, autoTick=True,
                               autoTickPeriod=cfg.auto_tick_period, appendEntriesUseBatch=cfg.append_entries_batch,
                               appendEntriesPeriod=cfg.append_entries_period, raftMinTimeout=cfg.raft_min_timeout,
                               raftMaxTimeout=cfg.raft_max_timeout, leaderFallbackTimeout=cfg.leader_fallback_timeout,
                               journalFile=journal, dynamicMembershipChange=True,
                               logCompactionMinEntries=cfg.compaction_min_entries,
                               fullDumpFile=str(Path(cfg.data_dir) / "raw.dump"))
            super().__init__(cfg.raft_address, [p.raft for p in cfg.peer_list()], conf, transportClass=transport)

        @replicated
        def incr(self, data: bytes) -> int:
            self.value += 1
            return self.value

    node = Counter()

    def propose(proposer: int, done: Callable[[str | None], None]) -> None:
        node.incr(PAYLOAD, callback=lambda r, e: done(None if e == 0 else f"raft:{e}"))

    return node._isLeader, propose, node.destroy


def make_ours(cfg, agents: int):
    from coordinator.api.v1 import coordinator_pb2 as pb
    from coordinator.api.v1 import log_pb2
    from coordinator.core.commands import decode_result
    from coordinator.replication.node import CoordinatorNode
    from coordinator.storage import open_store

    node = CoordinatorNode(cfg, open_store("lmdb", Path(cfg.data_dir) / "state"))
    counters: dict[int, int] = {}

    def entry(rid: str, **command) -> bytes:
        return log_pb2.LogEntry(request_id=rid, proposed_at=time.time(), **command).SerializeToString()

    def setup() -> None:
        """One group and one agent per proposer, so every CommitCheckpoint is accepted."""
        done = threading.Semaphore(0)
        node.propose(entry("bench-group", create_group=pb.CreateGroupRequest(request_id="bench-group", spec=pb.GroupSpec(
            group="bench", mode=pb.CIC_BCS, lease_ttl_s=3600))), lambda r, e: done.release())
        done.acquire(timeout=30)
        for a in range(agents):
            node.propose(entry(f"bench-reg-{a}", register=pb.RegisterRequest(secret=b"s" * 16, 
                request_id=f"bench-reg-{a}", group="bench", agent_id=f"a{a}")), lambda r, e: done.release())
        for _ in range(agents):
            done.acquire(timeout=30)

    def propose(proposer: int, done: Callable[[str | None], None]) -> None:
        index = counters[proposer] = counters.get(proposer, 0) + 1
        rid = f"c-{proposer}-{index}"
        data = entry(rid, commit_checkpoint=pb.CommitCheckpointRequest(
            request_id=rid, token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
            checkpoint=pb.CheckpointMeta(group="bench", agent_id=f"a{proposer}", index=index, kind=pb.BASIC,
                                         blob_uri=f"file:///blobs/a{proposer}/{index}", sha256="ab" * 32,
                                         size=4096, config_hash="cfg-1")))

        def on_result(result: bytes | None, error: str | None) -> None:
            if error is None and result is not None and result.startswith(b"Failure\n"):
                error = f"rejected:{getattr(decode_result(result), 'code', '?')}"
            done(error)

        node.propose(data, on_result)

    return node.is_leader, propose, node.close, setup


def load(propose: Propose, concurrency: int, seconds: float, max_ops: int) -> dict:
    """Keep `concurrency` proposals in flight until the time or count budget is spent."""
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    lock = threading.Lock()
    end = time.monotonic() + seconds
    finished = threading.Event()
    active = [concurrency]

    def issue(proposer: int) -> None:
        started = time.perf_counter()

        def done(error: str | None) -> None:
            with lock:
                if error is None:
                    latencies.append(time.perf_counter() - started)
                else:
                    failures[error] += 1
                more = time.monotonic() < end and len(latencies) + failures.total() < max_ops
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
    return {"concurrency": concurrency, "ops": len(latencies), "failures": dict(failures),
            "ops_s": len(latencies) / elapsed, "p50_ms": percentile(latencies, 0.5) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3}


def serve(args: argparse.Namespace) -> None:
    from coordinator import config

    cfg = config.load(env={}, flags={"raft_address": args.raft, "peers": tuple(args.peers.split(",")),
                                     "data_dir": args.data_dir, "raft_password": secrets.token_hex(16), "auto_tick_period": args.tick,
                                     "compaction_min_entries": 1_000_000,
                                     "insecure": True,  # in-process proposals, no gRPC port
                                     "append_entries_batch": args.batch, "append_entries_period": args.period})
    setup: Callable[[], None] = lambda: None  # noqa: E731
    if args.kind == "ours":
        is_leader, propose, close, setup = make_ours(cfg, max(args.concurrency))
    else:
        is_leader, propose, close = make_raw(cfg, conflict_aware_journal=args.kind == "raw+j")

    def work() -> list[dict]:
        setup()
        return [load(propose, c, args.seconds, args.max_ops) for c in args.concurrency]

    _cluster.serve(args, is_leader, work, close, timeout=budget(args))


# ---- driver ----------------------------------------------------------------------

def budget(args: argparse.Namespace) -> float:
    return 60 + len(args.concurrency) * (args.seconds + 30)


def node_flags(args: argparse.Namespace, kind: str) -> list[str]:
    return ["--kind", kind, "--seconds", str(args.seconds), "--max-ops", str(args.max_ops), "--tick", str(args.tick),
            "--batch", str(args.batch).lower(), "--period", str(args.period),
            "--concurrency", ",".join(map(str, args.concurrency))]


def print_table(args: argparse.Namespace, results: dict[str, list[dict]]) -> None:
    print(f"3-node loopback cluster, {os.cpu_count()} cores, autoTickPeriod {args.tick}s, "
          f"appendEntriesUseBatch {args.batch}, appendEntriesPeriod {args.period}s, "
          f"<= {args.seconds}s / {args.max_ops} ops per cell")
    kinds = list(results)
    header = " | ".join(f"{k + ' ops/s':>11} {'p50 ms':>7} {'p99 ms':>7}" for k in kinds)
    ratios = [k for k in kinds if k != "ours" and "ours" in results]
    print(f"{'in flight':>9} | {header} | " + " ".join(f"{'ours/' + k:>10}" for k in ratios))
    for i, concurrency in enumerate(args.concurrency):
        rows = {k: results[k][i] for k in kinds}
        cells = " | ".join(f"{r['ops_s']:>11.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f}" for r in rows.values())
        ratio = " ".join(f"{rows['ours']['ops_s'] / max(rows[k]['ops_s'], 1e-9):>10.2f}" for k in ratios)
        print(f"{concurrency:>9} | {cells} | {ratio}")
        for k, r in rows.items():
            if r["failures"]:
                print(f"{'':>9}   failures {k}: {r['failures']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small cells (1 s, 3000 ops) for a smoke run")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell at most")
    parser.add_argument("--max-ops", type=int, default=20_000, help="operations per cell at most")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 128])
    parser.add_argument("--kinds", type=lambda s: s.split(","), default=list(KINDS), help=f"subset of {','.join(KINDS)}")
    parser.add_argument("--tick", type=float, default=0.005, help="pysyncobj autoTickPeriod")
    parser.add_argument("--batch", type=lambda s: s.lower() == "true", default=False,
                        help="appendEntriesUseBatch (true/false)")
    parser.add_argument("--period", type=float, default=0.05, help="appendEntriesPeriod seconds")
    parser.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    _cluster.add_serve_flags(parser)
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.max_ops = min(args.seconds, 1.0), min(args.max_ops, 3000)
    if args.serve:
        serve(args)
        return 0
    results = {kind: _cluster.run_cluster(Path(__file__), node_flags(args, kind), timeout=budget(args), label=kind)
               for kind in args.kinds}
    print_table(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
