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

--steps N: long threads instead. First, per saver, N steps on one thread, each a put
of a one-int state and a put_writes one after the other; the table gives each step's
latency at the thread's start and at its end, and what the saver stores once the N
steps are written (the SQLite file; for raftpoint the blob store, and after `raftpoint
gc`, which drops the heads later ones superseded; the coordinator's own files not
counted). Then the graph (whose put_writes and put overlap as LangGraph makes them) on
an old thread grown to N checkpoints, and in rounds, the savers and threads taking turns
so that the machine's other load falls on all alike: one invocation on a new thread,
one on a young thread (about step 10) and one on the old thread (past step N).
--inline-sweep: the cost of a step whose one value of S bytes changes every step,
stored inline in the head or as a blob, for the inline_max default.
--threads N: one ainvoke on each of N threads, one after another and all at once.
--blob-heads: also the raftpoint savers whose store writes every thread head as a blob
(inline_max_bytes=0: what each step wrote before small heads travelled in the commit).
Run: python benchmarks/langgraph_saver.py [--quick] [--blob-heads] [--steps N | --inline-sweep | --threads N]
"""
from __future__ import annotations

import argparse
import asyncio
import operator
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Iterator, TypedDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from agent_blobs import percentile  # noqa: E402

from agent_client import blob_gc, testing  # noqa: E402
from agent_client.blobstore import LocalBlobStore  # noqa: E402
from agent_client.langgraph import RaftpointSaver  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

TEXT = "x" * 1024
GRAPH_STEPS = 5  # checkpoints an invocation of chain_graph writes: its input's, and one per super-step
YOUNG_INVOCATIONS = 3  # timed invocations of a young thread before another takes its place
NOTES_KEPT = 3  # SteadyChain's notes: one invocation's, so young and old threads hold the same state


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
    notes: Annotated[list[str], operator.add]  # grows by 3 an invocation


def recent_notes(kept: list[str], new: list[str]) -> list[str]:
    return (kept + new)[-NOTES_KEPT:]


class SteadyChain(TypedDict):
    """Chain whose state stops growing after one invocation: old against young threads
    then compares the length of their history alone, not also the size of their state
    (Chain's notes pass 1 KiB after about 40 invocations, and a value that size is a
    blob of its own at every step, in a thread of any age)."""
    total: Annotated[int, operator.add]
    notes: Annotated[list[str], recent_notes]


def chain_graph(saver: BaseCheckpointSaver, state: type = Chain) -> Any:
    builder = StateGraph(state)
    for name in ("plan", "research", "write"):
        builder.add_node(name, lambda s, name=name: {"total": 1, "notes": [name]})
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "research")
    builder.add_edge("research", "write")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=saver)


def invoke_per_step(graph: Any, config: dict[str, Any]) -> float:
    """Seconds per step of one invocation of chain_graph: its time over the checkpoints it writes."""
    start = time.perf_counter()
    graph.invoke({"total": 0, "notes": []}, config)
    return (time.perf_counter() - start) / GRAPH_STEPS


def new_thread(prefix: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{prefix}-{uuid.uuid4().hex[:8]}"}}


def bench_graph(saver: BaseCheckpointSaver, invocations: int) -> tuple[float, list[float]]:
    """Graph steps per second of `invocations` invocations on one new thread, and each
    invocation's seconds per step."""
    graph, config = chain_graph(saver), new_thread("graph")
    per_step = [invoke_per_step(graph, config) for _ in range(invocations)]
    return len(list(saver.list(config))) / (sum(per_step) * GRAPH_STEPS), per_step


def graph_turns(savers: dict[str, BaseCheckpointSaver], steps: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per saver, seconds per step of the chain graph on a new thread (its first
    invocation), on a young thread (checkpoints 5-20) and on an old one (past `steps`
    checkpoints, grown first, untimed). The savers and the three threads take turns
    every round, so a burst of the machine's other load falls on all of them alike and
    old against young compares a step at `steps` with one at about 10, of the same
    state (SteadyChain)."""
    graphs = {name: chain_graph(saver, SteadyChain) for name, saver in savers.items()}
    old = {name: new_thread("old") for name in graphs}
    for name, graph in graphs.items():
        for _ in range(steps // GRAPH_STEPS):
            graph.invoke({"total": 0, "notes": []}, old[name])
    young: dict[str, dict[str, Any]] = {}
    timings: dict[str, dict[str, list[float]]] = {name: {"new": [], "young": [], "old": []} for name in graphs}
    for turn in range(rounds):
        for name, graph in graphs.items():
            if turn % YOUNG_INVOCATIONS == 0:  # a young thread's first invocation is a new thread's
                young[name] = new_thread("young")
                invoke_per_step(graph, young[name])
            timings[name]["new"].append(invoke_per_step(graph, new_thread("new")))
            timings[name]["young"].append(invoke_per_step(graph, young[name]))
            timings[name]["old"].append(invoke_per_step(graph, old[name]))
    return timings


def graph_table(timings: dict[str, dict[str, list[float]]], steps: int, rounds: int) -> str:
    """Per-step p50 and p99 on new, young and old threads, old against young, and against SQLite's."""
    ms = {name: {kind: (percentile(t, 0.5), percentile(t, 0.99)) for kind, t in kinds.items()}
          for name, kinds in timings.items()}
    sqlite = ms["SqliteSaver"]
    lines = [f"{rounds} rounds of a 3-node chain, the savers taking turns; each round one invocation on a new "
             f"thread, one on a young thread (checkpoints 5-{5 * (YOUNG_INVOCATIONS + 1)}) and one on an old one "
             f"(past {steps} checkpoints); a step's time is its invocation's over its {GRAPH_STEPS} checkpoints\n",
             "| saver | new thread p50 ms | p99 ms | young p50 ms | p99 ms | old p50 ms | p99 ms | old vs young "
             "p50 / p99 | new thread vs SQLite p50 / p99 | old vs SQLite p50 / p99 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in ms.items():
        cells = [f"{m[kind][q] * 1e3:.2f}" for kind in ("new", "young", "old") for q in (0, 1)]
        ratios = [(m["old"], m["young"]), (m["new"], sqlite["new"]), (m["old"], sqlite["old"])]
        lines.append(f"| {name} | {' | '.join(cells)} | "
                     + " | ".join(f"{a[0] / b[0]:.2f}x / {a[1] / b[1]:.2f}x" for a, b in ratios) + " |")
    return "\n".join(lines) + "\n"


def bench_long_thread(saver: BaseCheckpointSaver, steps: int, text_bytes: int = 0) -> list[float]:
    """Seconds per step (a put and a put_writes) of `steps` steps on one new thread."""
    config: dict[str, Any] = {"configurable": {"thread_id": f"long-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    base = empty_checkpoint()
    took = []
    for i in range(steps):
        checkpoint = create_checkpoint(base, None, i)
        changed = {"count": i + 1, **({"text": i + 1} if text_bytes else {})}
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], **changed}
        checkpoint["channel_values"] = {"count": i, **({"text": f"{i:0{text_bytes}d}"} if text_bytes else {})}
        start = time.perf_counter()
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, changed)
        saver.put_writes(config, [("count", i + 1)], f"task-{i}")
        took.append(time.perf_counter() - start)
        base = checkpoint
    return took


def stored(files: Iterable[Path]) -> str:
    found = [f for f in files if f.is_file()]
    return f"{sum(f.stat().st_size for f in found) / 1e6:.2f} MB, {len(found)} files"


@contextmanager
def savers(tmp: Path, blob_heads: bool = False, **options: int) -> Iterator[dict[str, Callable[[], Any]]]:
    """Each saver's factory; `options` go to the raftpoint savers. `blob_heads`: also
    each raftpoint saver with a store that writes its heads as blobs."""
    with ExitStack() as stack:
        sqlite = stack.enter_context(SqliteSaver.from_conn_string(str(tmp / "sqlite.db")))
        in_process = stack.enter_context(testing.coordinator())
        cluster = stack.enter_context(LocalCluster(tmp / "cluster", 3).start_all())
        cluster.leader()
        endpoints = [node.grpc for node in cluster.nodes]
        made = {
            "InMemorySaver": lambda: InMemorySaver(),
            "SqliteSaver": lambda: sqlite,
            "raftpoint in-process": lambda: stack.enter_context(RaftpointSaver(
                in_process.address, tmp / "blobs-ip", tls=in_process.client_tls(), **options)),
            "raftpoint 3 nodes": lambda: stack.enter_context(RaftpointSaver(endpoints, tmp / "blobs-3n",
                                                                             tls=cluster.client_tls(), **options)),
        }
        if blob_heads:
            made["raftpoint in-process, heads as blobs"] = lambda: stack.enter_context(RaftpointSaver(
                in_process.address, LocalBlobStore(tmp / "blobs-ip-heads", inline_max_bytes=0),
                tls=in_process.client_tls(), **options))
            made["raftpoint 3 nodes, heads as blobs"] = lambda: stack.enter_context(RaftpointSaver(
                endpoints, LocalBlobStore(tmp / "blobs-3n-heads", inline_max_bytes=0), tls=cluster.client_tls(),
                **options))
        yield made


class InlineTally:
    """The text of the data: URIs a saver's puts committed: what its heads held inline
    add to the coordinator's records (on every node) until `raftpoint gc` releases them."""

    def __init__(self, saver: RaftpointSaver) -> None:
        self.chars = 0
        put = saver.blobs.put

        def counted(data: Any, **kw: Any) -> Any:
            result = put(data, **kw)
            self.chars += len(result.uri) if result.uri.startswith("data:") else 0
            return result
        saver.blobs.put = counted  # type: ignore[method-assign]


def store_sizes(saver: BaseCheckpointSaver, tmp: Path, tally: InlineTally | None) -> tuple[str, str]:
    """What the saver stores, and (raftpoint) what stays after `raftpoint gc`."""
    if isinstance(saver, SqliteSaver):
        return stored(tmp.glob("sqlite.db*")), "-"
    if not isinstance(saver, RaftpointSaver) or tally is None:
        return "(memory)", "-"
    root = Path(saver.blobs.backend.root)  # type: ignore[attr-defined]
    before = f"{stored(root.rglob('*'))}; {tally.chars / 1e6:.2f} MB inline in the coordinator's records"
    blob_gc.collect(saver.conn, saver.blobs, [saver.threads.group], grace_s=0)  # type: ignore[arg-type]
    return before, stored(root.rglob("*"))


def long_thread(tmp: Path, steps: int) -> None:
    window = max(1, min(50, steps // 10))
    rows, made = [], {}
    with savers(tmp) as make:
        for name, factory in make.items():
            saver = made[name] = factory()
            tally = InlineTally(saver) if isinstance(saver, RaftpointSaver) else None
            took = bench_long_thread(saver, steps)
            rows.append((name, took[:window], took[-window:], *store_sizes(saver, tmp, tally)))
            print(f"  {name}: done", file=sys.stderr)
        rounds = max(YOUNG_INVOCATIONS, min(100, steps // 10))
        print(graph_table(graph_turns(made, steps, rounds), steps, rounds))  # after the sizes: the steps' alone
    sqlite_late = next(percentile(r[2], 0.5) for r in rows if r[0] == "SqliteSaver")
    print(f"{steps} steps on one thread (a put of a one-int state and a put_writes each, one after the other); "
          f"start: steps 1-{window}, end: the last {window}\n")
    print("| saver | start p50 ms | start p99 ms | end p50 ms | end p99 ms | end vs start | end vs SQLite | "
          "stored | after raftpoint gc |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for name, early, late, size, collected in rows:
        print(f"| {name} | {percentile(early, 0.5) * 1e3:.2f} | {percentile(early, 0.99) * 1e3:.2f} | "
              f"{percentile(late, 0.5) * 1e3:.2f} | {percentile(late, 0.99) * 1e3:.2f} | "
              f"{percentile(late, 0.5) / percentile(early, 0.5):.2f}x | {percentile(late, 0.5) / sqlite_late:.2f}x | "
              f"{size} | {collected} |")


def bench_threads(saver: BaseCheckpointSaver, threads: int) -> tuple[float, float]:
    """Seconds for one ainvoke on each of `threads` new threads: one after another, then all at once."""
    graph = chain_graph(saver)

    def run(tag: str, i: int) -> Any:
        return graph.ainvoke({"total": 0, "notes": []}, {"configurable": {"thread_id": f"{tag}-{i}-{uuid.uuid4().hex}"}})

    async def apart() -> None:
        for i in range(threads):
            await run("apart", i)

    async def together() -> None:
        await asyncio.gather(*(run("together", i) for i in range(threads)))

    asyncio.run(run("warm-up", 0))  # the group, the connection
    timings = []
    for scenario in (apart, together):
        start = time.perf_counter()
        asyncio.run(scenario())
        timings.append(time.perf_counter() - start)
    return timings[0], timings[1]


def many_threads(tmp: Path, threads: int) -> None:
    print(f"one ainvoke of a 3-node chain on each of {threads} threads\n")
    print("| saver | one after another s | all at once s | speed-up |")
    print("|---|---:|---:|---:|")
    with savers(tmp) as make:
        for name, factory in make.items():
            if name == "SqliteSaver":
                continue  # its async face is AsyncSqliteSaver, another class
            apart, together = bench_threads(factory(), threads)
            print(f"| {name} | {apart:.2f} | {together:.2f} | {apart / together:.2f}x |")


def inline_sweep(tmp: Path, steps: int) -> None:
    """A value of S bytes changing every step, inline (inline_max above S) or a blob (inline_max 0)."""
    print(f"{steps} steps on one thread, raftpoint in-process; a one-int channel and a text of S bytes, "
          "both changing every step\n")
    print("| S bytes | inline p50 ms | blob p50 ms | inline bytes/step | blob bytes/step |")
    print("|---:|---:|---:|---:|---:|")
    with testing.coordinator() as running:
        for size in (64, 256, 1024, 4096, 16384):
            cells = []
            for inline_max in (size + 16, 0):
                root = tmp / f"sweep-{size}-{inline_max}"
                with RaftpointSaver(running.address, root, tls=running.client_tls(), inline_max=inline_max,
                                    group=f"sweep-{uuid.uuid4().hex[:8]}") as saver:
                    took = bench_long_thread(saver, steps, text_bytes=size)
                size_now = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
                cells.append((percentile(took, 0.5) * 1e3, size_now / steps))
            print(f"| {size} | {cells[0][0]:.2f} | {cells[1][0]:.2f} | {cells[0][1]:.0f} | {cells[1][1]:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--steps", type=int, help="one thread of this many steps instead")
    parser.add_argument("--inline-sweep", action="store_true", help="inline values against blobs, by size")
    parser.add_argument("--threads", type=int, help="one ainvoke on each of this many threads instead")
    parser.add_argument("--blob-heads", action="store_true", help="also the raftpoint savers with heads as blobs")
    args = parser.parse_args()
    if args.steps or args.inline_sweep or args.threads:
        with tempfile.TemporaryDirectory(prefix="lg-bench-", dir=str(ROOT)) as tmp:
            if args.steps:
                long_thread(Path(tmp), args.steps)
            elif args.threads:
                many_threads(Path(tmp), args.threads)
            else:
                inline_sweep(Path(tmp), 100 if args.quick else 400)
        return
    n, invocations = (50, 10) if args.quick else (300, 40)
    rows = []
    with tempfile.TemporaryDirectory(prefix="lg-bench-", dir=str(ROOT)) as tmp, \
            savers(Path(tmp), args.blob_heads) as make:
        for name, factory in make.items():
            saver = factory()
            puts, gets = bench_put_get(saver, n)
            steps, per_step = bench_graph(saver, invocations)
            rows.append((name, puts, gets, steps, per_step))
            print(f"  {name}: done", file=sys.stderr)
    sqlite_steps = next(r[3] for r in rows if r[0] == "SqliteSaver")
    print(f"puts and gets: {n} each on one thread; graph: {invocations} invocations of a 3-node chain on a new "
          "thread (a step's time is its invocation's over its checkpoints)\n")
    print("| saver | put p50 ms | put p99 ms | get_tuple p50 ms | get_tuple p99 ms | graph steps/s | "
          "graph step p50 ms | graph step p99 ms | step cost vs SQLite |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, puts, gets, steps, per_step in rows:
        print(f"| {name} | {percentile(puts, 0.5) * 1e3:.2f} | {percentile(puts, 0.99) * 1e3:.2f} | "
              f"{percentile(gets, 0.5) * 1e3:.2f} | {percentile(gets, 0.99) * 1e3:.2f} | {steps:.0f} | "
              f"{percentile(per_step, 0.5) * 1e3:.2f} | {percentile(per_step, 0.99) * 1e3:.2f} | "
              f"{sqlite_steps / steps:.2f}x |")


if __name__ == "__main__":
    main()
