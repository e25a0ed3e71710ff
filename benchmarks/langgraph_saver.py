"""LangGraph savers side by side: put and get_tuple latency, and steps per second of a small graph.

Savers: LangGraph's InMemorySaver, its SqliteSaver (a file in a temp directory on
the disk under test), and RaftpointSaver against the in-process coordinator
(agent_client.testing: no Raft) and against a real 3-node cluster on loopback
(coordinator.harness.local_cluster, journal and LMDB fsynced as in production).
put: a checkpoint on one thread whose two channels are a 1 KiB text and a counter,
only the counter changing (what a graph step writes). get_tuple: the thread's
latest checkpoint. Graph: three nodes in a chain (each one super-step, one
checkpoint and one put_writes), invoked repeatedly on one thread; "steps/s" counts
checkpoints written per second. One run; p99 of few samples is near their maximum.
Run: python benchmarks/langgraph_saver.py [--quick]
"""
from __future__ import annotations

import argparse
import operator
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, TypedDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from agent_blobs import percentile  # noqa: E402

from agent_client import testing  # noqa: E402
from agent_client.langgraph import RaftpointSaver  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

TEXT = "x" * 1024


def bench_put_get(saver: BaseCheckpointSaver, n: int) -> tuple[list[float], list[float]]:
    config: dict[str, Any] = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    base = empty_checkpoint()
    puts, gets = [], []
    for i in range(n):
        checkpoint = create_checkpoint(base, None, i)
        changed = {"count": i + 1} if i else {"count": 1, "text": 1}
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], **changed}
        checkpoint["channel_values"] = {"text": TEXT, "count": i}
        start = time.perf_counter()
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, changed)
        puts.append(time.perf_counter() - start)
        base = checkpoint
    latest = {"configurable": {**config["configurable"], "checkpoint_id": None}}
    for _ in range(n):
        start = time.perf_counter()
        assert saver.get_tuple(latest) is not None
        gets.append(time.perf_counter() - start)
    return puts, gets


class Chain(TypedDict):
    total: Annotated[int, operator.add]
    notes: Annotated[list[str], operator.add]


def bench_graph(saver: BaseCheckpointSaver, invocations: int) -> float:
    builder = StateGraph(Chain)
    for name in ("plan", "research", "write"):
        builder.add_node(name, lambda s, name=name: {"total": 1, "notes": [name]})
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "research")
    builder.add_edge("research", "write")
    builder.add_edge("write", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"graph-{uuid.uuid4().hex[:8]}"}}
    start = time.perf_counter()
    for _ in range(invocations):
        graph.invoke({"total": 0, "notes": []}, config)
    elapsed = time.perf_counter() - start
    steps = len(list(saver.list(config)))
    return steps / elapsed


@contextmanager
def savers(tmp: Path) -> Iterator[dict[str, Callable[[], Any]]]:
    with ExitStack() as stack:
        sqlite = stack.enter_context(SqliteSaver.from_conn_string(str(tmp / "sqlite.db")))
        in_process = stack.enter_context(testing.coordinator())
        cluster = stack.enter_context(LocalCluster(tmp / "cluster", 3).start_all())
        cluster.leader()
        endpoints = [node.grpc for node in cluster.nodes]
        yield {
            "InMemorySaver": lambda: InMemorySaver(),
            "SqliteSaver": lambda: sqlite,
            "raftpoint in-process": lambda: stack.enter_context(RaftpointSaver(in_process.address, tmp / "blobs-ip",
                                                                                  tls=in_process.client_tls())),
            "raftpoint 3 nodes": lambda: stack.enter_context(RaftpointSaver(endpoints, tmp / "blobs-3n",
                                                                             tls=cluster.client_tls())),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    n, invocations = (50, 10) if args.quick else (300, 40)
    rows = []
    with tempfile.TemporaryDirectory(prefix="lg-bench-", dir=str(ROOT)) as tmp, savers(Path(tmp)) as make:
        for name, factory in make.items():
            saver = factory()
            puts, gets = bench_put_get(saver, n)
            steps = bench_graph(saver, invocations)
            rows.append((name, puts, gets, steps))
            print(f"  {name}: done", file=sys.stderr)
    sqlite_steps = next(r[3] for r in rows if r[0] == "SqliteSaver")
    print(f"puts and gets: {n} each on one thread; graph: {invocations} invocations of a 3-node chain\n")
    print("| saver | put p50 ms | put p99 ms | get_tuple p50 ms | get_tuple p99 ms | graph steps/s | step cost vs SQLite |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, puts, gets, steps in rows:
        print(f"| {name} | {percentile(puts, 0.5) * 1e3:.2f} | {percentile(puts, 0.99) * 1e3:.2f} | "
              f"{percentile(gets, 0.5) * 1e3:.2f} | {percentile(gets, 0.99) * 1e3:.2f} | {steps:.0f} | "
              f"{sqlite_steps / steps:.2f}x |")


if __name__ == "__main__":
    main()
