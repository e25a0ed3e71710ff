"""Where a LangGraph saver's commit goes on 3 nodes, next to a bare commit in the same run.

Starts 3 nodes on loopback with RAFTPOINT_TRACE_FILE set (opentelemetry-sdk, the `dev`
extra, gives the leader's stages; without it only the client's figures are printed)
and alternates rounds of two paths:
(a) the saver: invocations of langgraph_saver.py's 3-node chain graph on one thread
through a RaftpointSaver, timing each CommitCheckpoint call, each blob file written
before a commit (heads that do not travel inline; values and sealed segments), each
put, and the client's CPU per graph step against the same graph on InMemorySaver;
(b) bare commits: the saver's last commit of another thread (one invocation of the
graph) sent again and again through the saver's own Connection, each with a new
request id and index: a commit of the same size by the same client.
Prints the client's figures, and per path the leader's stages (commit_hops.hop_table).
Run: python benchmarks/langgraph_commit.py [--rounds 8] [--invocations 10] [--bare 60]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from commit_hops import hop_table  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph_saver import GRAPH_STEPS, chain_graph, new_thread  # noqa: E402
from agent_client.langgraph import RaftpointSaver  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402
from coordinator.tracing import TRACE_FILE_ENV, read_trace_file  # noqa: E402

Timings = dict[str, list[float]]


def timed(obj: Any, name: str, into: list[float], when: Callable[..., bool] = lambda *a, **k: True) -> None:
    """Wrap obj.name so that each call for which `when(*args)` holds adds its seconds to `into`."""
    inner = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            if when(*args, **kwargs):
                into.append(time.perf_counter() - start)

    setattr(obj, name, wrapper)


def run(tmp: Path, rounds: int, invocations: int,
        bare_per_round: int) -> tuple[Timings, dict[str, list[tuple[float, float]]], Path]:
    trace_file = tmp / "spans.jsonl"
    os.environ[TRACE_FILE_ENV] = str(trace_file)  # the nodes inherit it
    t: Timings = defaultdict(list)
    windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with LocalCluster(tmp / "cluster", 3).start_all() as cluster:
        cluster.leader()
        saver = RaftpointSaver(cluster.endpoints(), tmp / "blobs", tls=cluster.client_tls())
        last: dict[str, Any] = {}
        commits = lambda service, method, request, **kw: method == "CommitCheckpoint"  # noqa: E731
        inner_call = saver.conn.call

        def remember(service: str, method: str, request: Any, **kw: Any) -> Any:
            last[method] = request
            return inner_call(service, method, request, **kw)

        saver.conn.call = remember  # type: ignore[method-assign]
        timed(saver.conn, "call", t["saver commit call"], commits)
        timed(saver, "put", t["put"])
        graph, config = chain_graph(saver), new_thread("graph")
        in_memory, in_memory_config = chain_graph(InMemorySaver()), new_thread("graph")
        # Each thread's Register and first reads, untimed; the bare commits repeat the
        # last commit of a thread of their own (so the graph's thread keeps its indexes).
        graph.invoke({"total": 0, "notes": []}, new_thread("bare"))
        template = last["CommitCheckpoint"]
        graph.invoke({"total": 0, "notes": []}, config)
        for key in t:
            t[key].clear()
        blobs_put = saver.blobs.put

        def put_file(data: Any, **kw: Any) -> Any:
            began = time.perf_counter()
            stored = blobs_put(data, **kw)
            if not stored.uri.startswith("data:"):  # a head may travel inline; values and segments never do
                kind = "head" if kw.get("inline", True) else "value or segment"
                t[f"file written: {kind}"].append(time.perf_counter() - began)
            return stored

        saver.blobs.put = put_file  # type: ignore[method-assign]
        index = template.checkpoint.index
        for _ in range(rounds):
            start = time.time()
            for _ in range(invocations):
                began, cpu = time.perf_counter(), time.process_time()
                graph.invoke({"total": 0, "notes": []}, config)
                t["graph step"].append((time.perf_counter() - began) / GRAPH_STEPS)
                t["client CPU per graph step"].append((time.process_time() - cpu) / GRAPH_STEPS)
                began, cpu = time.perf_counter(), time.process_time()
                in_memory.invoke({"total": 0, "notes": []}, in_memory_config)
                t["client CPU per graph step, InMemorySaver"].append((time.process_time() - cpu) / GRAPH_STEPS)
            windows["saver"].append((start, time.time()))
            start = time.time()
            for _ in range(bare_per_round):
                request = pb.CommitCheckpointRequest()
                request.CopyFrom(template)
                request.request_id, index = uuid.uuid4().hex, index + 1
                request.checkpoint.index = index
                began, cpu = time.perf_counter(), time.process_time()
                inner_call("AgentService", "CommitCheckpoint", request)
                t["bare commit call"].append(time.perf_counter() - began)
                t["client CPU per bare commit call"].append(time.process_time() - cpu)
            windows["bare"].append((start, time.time()))
        saver.close()
    return t, windows, trace_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--invocations", type=int, default=10, help="graph invocations per round")
    parser.add_argument("--bare", type=int, default=60, help="bare commits per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lg-commit-") as tmp:
        t, windows, trace_file = run(Path(tmp), args.rounds, args.invocations, args.bare)
        spans = read_trace_file(trace_file) if trace_file.exists() else []
    print(f"graph: {args.rounds} x {args.invocations} invocations\n")
    print("| client side | count | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for key in ("graph step", "client CPU per graph step", "client CPU per graph step, InMemorySaver", "put",
                "client CPU per bare commit call",
                "saver commit call", "bare commit call", "file written: head", "file written: value or segment"):
        values = sorted(t[key])
        if values:
            p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
            print(f"| {key} | {len(values)} | {statistics.median(values) * 1e3:.2f} | {p99 * 1e3:.2f} |")
    commits = len(t["saver commit call"])
    print(f"\nper saver commit, files written (and synced): heads {len(t['file written: head']) / commits:.2f}, "
          f"values and segments {len(t['file written: value or segment']) / commits:.2f}")
    if spans:
        for path, spans_of in windows.items():
            inside = [s for s in spans if any(a <= s.start.timestamp() <= b for a, b in spans_of)]
            print(f"\n{path}: the leader's stages\n\n| stage | p50 ms | p99 ms | share of the call's p50 |")
            print("|---|---:|---:|---:|")
            print("\n".join(hop_table(inside)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
