"""Where a commit's time goes, hop by hop, from the leader's own trace spans.

Starts 3 nodes with RAFTPOINT_TRACE_FILE set (each node writes its finished spans as
JSON lines; opentelemetry-sdk must be installed: the `dev` extra has it), drives
CommitCheckpoint at each concurrency for a few seconds, and prints per stage of a
commit (admission, batch, replicate, apply, answer: coordinator/tracing.py says what
each covers) its p50 and p99 and its share of the call, next to the whole server
call; and the background store commits (`raftpoint.store`) with the number of
commits each made durable. Tracing itself costs a little per call (a span exported
to a file each), so read the shares, not the absolute figures, against the untraced
benchmarks (api_vs_etcd.py, cpu_per_op.py). Linux or macOS; loopback only.
Run: python benchmarks/commit_hops.py [--seconds 4] [--in-flight 1,32,128]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cpu_per_op import commits  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402
from coordinator.tracing import TRACE_FILE_ENV, WrittenSpan, read_trace_file  # noqa: E402

COMMIT_SPAN = "/raftpoint.v1.AgentService/CommitCheckpoint"
STAGES = ("raftpoint.admission", "raftpoint.batch", "raftpoint.replicate", "raftpoint.apply", "raftpoint.answer")
STORE_SPAN = "raftpoint.store"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def hop_table(spans: list[WrittenSpan]) -> list[str]:
    """Rows of the Markdown table for the commits in `spans` (those with stage spans: a
    call a follower redirected has none)."""
    children: dict[str, dict[str, float]] = defaultdict(dict)
    for s in spans:
        if s.name in STAGES and s.parent_id:
            children[s.parent_id][s.name] = s.ms
    calls = [s for s in spans if s.name == COMMIT_SPAN and s.span_id in children]
    if not calls:
        return ["(no traced commits: is opentelemetry-sdk installed?)"]
    total = statistics.median(c.ms for c in calls)
    rows = [f"| whole call ({len(calls)} commits) | {total:.3f} | {percentile([c.ms for c in calls], 0.99):.3f} "
            f"| 100% |"]
    for stage in STAGES:
        values = [children[c.span_id][stage] for c in calls if stage in children[c.span_id]]
        if values:
            p50 = statistics.median(values)
            rows.append(f"| {stage} | {p50:.3f} | {percentile(values, 0.99):.3f} | {100 * p50 / total:.0f}% |")
    outside = [c.ms - sum(children[c.span_id].values()) for c in calls]
    rows.append(f"| outside the stages (gRPC and the event loop before admission, after the answer) | "
                f"{statistics.median(outside):.3f} | {percentile(outside, 0.99):.3f} | "
                f"{100 * statistics.median(outside) / total:.0f}% |")
    stores = [s for s in spans if s.name == STORE_SPAN]
    if stores:
        carried = sum(len(s.links) for s in stores) / len(stores)
        rows.append(f"| {STORE_SPAN} (after the answer; {len(stores)} commits, {carried:.1f} writes each) | "
                    f"{statistics.median(s.ms for s in stores):.3f} | "
                    f"{percentile([s.ms for s in stores], 0.99):.3f} | - |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of load per concurrency")
    parser.add_argument("--in-flight", default="1,32,128", help="commits in flight, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commit-hops-") as tmp:
        for concurrency in (int(c) for c in args.in_flight.split(",")):
            trace_file = Path(tmp) / f"spans-{concurrency}.jsonl"
            os.environ[TRACE_FILE_ENV] = str(trace_file)  # the nodes inherit it
            with LocalCluster(Path(tmp) / f"cluster-{concurrency}", 3).start_all() as cluster:
                leader = cluster.leader()
                n, _ = asyncio.run(commits(leader.grpc, concurrency, args.seconds, cluster.credentials,
                                           cluster.client_tls()))
            print(f"\n{concurrency} in flight: {n / args.seconds:.0f} commits/s (traced)\n")
            print("| stage | p50 ms | p99 ms | share of the call's p50 |")
            print("|---|---:|---:|---:|")
            print("\n".join(hop_table(read_trace_file(trace_file))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
