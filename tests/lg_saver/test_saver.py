"""RaftpointSaver beyond the conformance suite: fencing, incremental uploads, idempotent writes, a real graph."""
from __future__ import annotations

import asyncio
import operator
import threading
import uuid
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Callable, TypedDict

import pytest

pytest.importorskip("langgraph.graph")
from langgraph.graph import END, START, StateGraph  # noqa: E402

from agent_client import blob_gc, testing  # noqa: E402
from agent_client.blobstore import LocalBlobStore  # noqa: E402
from agent_client.blobs.chunking import parts_of  # noqa: E402
from agent_client.langgraph import RaftpointSaver, ThreadFenced  # noqa: E402
from agent_client.langgraph.thread_record import typed_to_json  # noqa: E402
from coordinator import channels  # noqa: E402
from tests.lg_saver.saver_steps import step, thread, wait_until  # noqa: E402
from tests.support.meeting import Meeting  # noqa: E402


class CountingStore(LocalBlobStore):
    """A blob store that counts what it is asked to store, and which states it was free
    to keep inline (heads) it stored as files."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts = 0
        self.bytes = 0
        self.states_as_files = 0

    def put(self, data: Any, **kw: Any):
        self.puts += 1
        self.bytes += sum(len(part) for part in parts_of(data))
        stored = super().put(data, **kw)
        self.states_as_files += kw.get("inline", True) and not stored.uri.startswith("data:")
        return stored


class GatedStore(LocalBlobStore):
    """A blob store whose first put of data containing `gate` waits until `release` is set."""

    def __init__(self, root: Path, gate: bytes) -> None:
        super().__init__(root)
        self.gate, self.waiting, self.release = gate, threading.Event(), threading.Event()

    def put(self, data: Any, **kw: Any):
        if self.gate in b"".join(parts_of(data)) and not self.waiting.is_set():
            self.waiting.set()
            assert self.release.wait(30), "never released"
        return super().put(data, **kw)


class GatedCountingStore(GatedStore, CountingStore):
    """Gated as GatedStore, counted as CountingStore (a put counts once the gate lets it through)."""


@pytest.fixture(scope="module")
def address():
    # The savers below take no tls=: they read the RAFTPOINT_* variables, as a deployed agent does.
    with testing.coordinator() as running, channels.environment(running.client_tls()):
        yield running.address


@pytest.fixture
def group() -> str:
    return f"lg-{uuid.uuid4().hex[:8]}"


def test_a_stale_second_writer_is_fenced_and_the_chain_does_not_fork(address, tmp_path: Path, group: str) -> None:
    with RaftpointSaver(address, tmp_path, group=group) as first, RaftpointSaver(address, tmp_path, group=group) as second:
        c1, v1 = step(None, {"msgs": ["hi"]}, 0)
        head = first.put(thread("t"), c1, {"step": 0}, v1)
        c2, v2 = step(c1, {"msgs": ["hi", "second"]}, 1)
        second.put(head, c2, {"step": 1}, v2)  # the second writer takes the thread over
        c3, v3 = step(c1, {"msgs": ["hi", "stale"]}, 1)
        with pytest.raises(ThreadFenced, match="newer writer"):
            first.put(head, c3, {"step": 1}, v3)
        with pytest.raises(ThreadFenced):
            first.put_writes({"configurable": {**head["configurable"]}}, [("msgs", "late")], "task-1")
        latest = second.get_tuple(thread("t"))
        assert latest.checkpoint["id"] == c2["id"]
        assert latest.checkpoint["channel_values"] == {"msgs": ["hi", "second"]}
        assert [t.checkpoint["id"] for t in second.list(thread("t"))] == [c2["id"], c1["id"]]  # no fork
        assert latest.pending_writes == []


def test_only_the_channels_a_step_changed_are_uploaded(address, tmp_path: Path, group: str) -> None:
    store = CountingStore(tmp_path)
    with RaftpointSaver(address, store, group=group) as saver:
        c1, v1 = step(None, {"a": "x" * 5000, "b": "y" * 5000}, 0)
        head = saver.put(thread("t"), c1, {}, v1)
        before = store.puts
        c2, v2 = step(c1, {"b": "z" * 5000}, 1)
        saver.put(head, c2, {}, v2)
        assert store.puts - before == 2  # channel b's new value, and the thread's head
        assert saver.get_tuple(thread("t")).checkpoint["channel_values"] == {"a": "x" * 5000, "b": "z" * 5000}


def test_small_values_travel_inside_the_head(address, tmp_path: Path, group: str) -> None:
    store = CountingStore(tmp_path)
    with RaftpointSaver(address, store, group=group, inline_max=100) as saver:
        c1, v1 = step(None, {"small": "s" * 90, "large": "l" * 110}, 0)
        head = saver.put(thread("t"), c1, {}, v1)
        assert store.puts == 2  # the large value and the head
        c2, v2 = step(c1, {"small": "t" * 90}, 1)
        saver.put(head, c2, {}, v2)
        assert store.puts == 3  # the head only
    with RaftpointSaver(address, tmp_path, group=group) as reader:
        assert reader.get_tuple(thread("t")).checkpoint["channel_values"] == {"small": "t" * 90, "large": "l" * 110}


def test_a_step_s_head_travels_inside_its_commit_and_the_tail_is_sealed_before_it_would_not(
        address, tmp_path: Path, group: str) -> None:
    """Each checkpoint adds about 900 bytes to the head, which would pass what a commit
    carries inline (4 KiB) after four: the tail is sealed early instead, so no step
    writes its head as a file (and syncs it) before its commit, and a segment is
    written once every few steps, not once per step."""
    store = CountingStore(tmp_path)
    steps = 32
    with RaftpointSaver(address, store, group=group) as saver:
        base, config = None, thread("t")
        for n in range(1, steps + 1):
            base, versions = step(base, {"count": n, "note": f"{n:04d}" + "n" * 300}, n)
            config = saver.put(config, base, {"source": "loop", "step": n}, versions)
        segments = store.puts - steps  # a head each step, and the segments
        assert store.states_as_files == 0, (f"{store.states_as_files} of {steps} heads were stored as files "
                                            f"({segments} segments)")
        assert 0 < segments <= steps // 3, f"{segments} segments for {steps} steps"
        assert len(list(saver.list(thread("t")))) == steps
    with RaftpointSaver(address, tmp_path, group=group) as reader:
        assert reader.get_tuple(thread("t")).checkpoint["channel_values"]["note"].startswith(f"{steps:04d}")
        assert len(list(reader.list(thread("t")))) == steps


@pytest.mark.slow
def test_the_bytes_a_step_writes_do_not_grow_with_the_thread(address, tmp_path: Path, group: str) -> None:
    """1,010 checkpoints of a one-int state: what the steps near the thousandth ask the
    blob store to write, the head and sealed segments, is what the steps near the tenth
    did. A new reader finds the latest one past the coordinator's first page of heads."""
    store = CountingStore(tmp_path)
    window = 2 * 16  # two seal periods: each window holds the same number of seals
    with RaftpointSaver(address, store, group=group) as saver:
        base, config, per_window = None, thread("t"), {}
        for n in range(1, 1011):
            before = store.bytes
            base, versions = step(base, {"count": n}, n)
            config = saver.put(config, base, {"source": "loop", "step": n}, versions)
            start = 8 if n < 500 else 1000 - window
            if start <= n < start + window:
                per_window[start] = per_window.get(start, 0) + store.bytes - before
            if n == 8 + window:  # the thread's cost at its start; stop as soon as a later window exceeds it
                early = per_window[8] / window
            if n >= 500 and store.bytes - before > early * window:
                pytest.fail(f"step {n} alone wrote {store.bytes - before} bytes, more than steps 8-39 together "
                            f"({early * window:.0f})")
        late = per_window[1000 - window] / window
        assert late <= 1.2 * early, f"steps 968-999 wrote {late:.0f} bytes a step on average, steps 8-39 {early:.0f}"
        assert len(list(saver.list(thread("t"), limit=3))) == 3
    with RaftpointSaver(address, tmp_path, group=group) as reader:
        assert reader.get_tuple(thread("t")).checkpoint["channel_values"] == {"count": 1010}


def test_a_retried_put_writes_commits_nothing_new(address, tmp_path: Path, group: str) -> None:
    store = CountingStore(tmp_path)
    with RaftpointSaver(address, store, group=group) as saver:
        c1, v1 = step(None, {"a": 1}, 0)
        head = saver.put(thread("t"), c1, {}, v1)
        saver.put_writes(head, [("a", 2), ("b", 3)], "task-1", "~0")
        before = store.puts
        saver.put_writes(head, [("a", 2), ("b", 3)], "task-1", "~0")
        assert store.puts == before
        assert saver.get_tuple(head).pending_writes == [("task-1", "a", 2), ("task-1", "b", 3)]


def test_a_thread_waiting_on_its_store_does_not_hold_up_another_thread(address, tmp_path: Path,
                                                                         group: str) -> None:
    store = GatedStore(tmp_path, gate=b"blocked")
    with RaftpointSaver(address, store, group=group) as saver:
        c1, v1 = step(None, {"a": 1}, 0)
        blocked = threading.Thread(target=saver.put, args=(thread("blocked"), c1, {}, v1))
        blocked.start()
        try:
            assert store.waiting.wait(30), "the blocked thread's head was never written"
            try:
                asyncio.run(asyncio.wait_for(saver.aput(thread("free"), c1, {}, v1), timeout=15))
            except TimeoutError:
                pytest.fail("aput to one thread waited 15 s for another thread's write")
        finally:
            store.release.set()
            blocked.join(30)
        assert saver.get_tuple(thread("blocked")).checkpoint["id"] == c1["id"]


def test_async_writes_to_many_threads_are_all_in_flight_at_once(address, tmp_path: Path, group: str) -> None:
    """More threads than asyncio's default worker pool has threads (at most 32) each
    await a write: every commit is in flight at once, so the cluster commits them
    together instead of a few at a time."""
    threads = 40
    with RaftpointSaver(address, tmp_path, group=group) as saver:
        c0, v0 = step(None, {"a": 0}, 0)
        configs = [saver.put(thread(f"t{n}"), c0, {}, v0) for n in range(threads)]  # the saver writes each
        meeting, real_call = Meeting(threads), saver.conn.call

        def call(service: str, method: str, request: Any, **kw: Any) -> Any:
            if method != "CommitCheckpoint":
                return real_call(service, method, request, **kw)
            with meeting.attended():
                return real_call(service, method, request, **kw)
        saver.conn.call = call  # type: ignore[method-assign]
        c1, v1 = step(c0, {"a": 1}, 1)

        async def write_all() -> None:
            await asyncio.gather(*(saver.aput(config, c1, {}, v1) for config in configs))
        asyncio.run(write_all())
        assert meeting.most == threads, f"at most {meeting.most} of {threads} threads' commits were in flight at once"
        assert {saver.get_tuple(thread(f"t{n}")).checkpoint["id"] for n in range(threads)} == {c1["id"]}


def test_a_thread_of_small_steps_writes_no_file(address, tmp_path: Path, group: str) -> None:
    """Its head travels inside the commit and its values inside the head: no blob per step."""
    with RaftpointSaver(address, tmp_path / "blobs", group=group) as saver:
        base, config = None, thread("t")
        for n in range(1, 6):
            base, versions = step(base, {"count": n}, n)
            config = saver.put(config, base, {"step": n}, versions)
            saver.put_writes(config, [("count", n)], f"task-{n}")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [], f"small steps wrote {written}"
    with RaftpointSaver(address, tmp_path / "another store", group=group) as reader:
        chain = list(reader.list(thread("t")))
        assert [t.checkpoint["channel_values"] for t in chain] == [{"count": n} for n in range(5, 0, -1)]


def test_raftpoint_gc_keeps_every_checkpoint_of_a_long_thread(address, tmp_path: Path, group: str) -> None:
    """GC releases every head but the latest; the segments and values they point to stay."""
    store = LocalBlobStore(tmp_path, inline_max_bytes=0)  # every head a blob, for GC to delete
    with RaftpointSaver(address, store, group=group, seal_after=4, inline_max=0) as saver:
        base, config = None, thread("t")
        for n in range(1, 41):
            base, versions = step(base, {"count": n}, n)
            config = saver.put(config, base, {"step": n}, versions)
            saver.put_writes(config, [("count", n)], f"task-{n}")
        report = blob_gc.collect(saver.conn, store, [group], grace_s=0)
        superseded = 2 * 40 - 1  # a head per put and per put_writes, but the latest
        assert len(report.released[group]) == superseded and report.result.manifests_removed == superseded, report
    with RaftpointSaver(address, tmp_path, group=group) as reader:
        chain = list(reader.list(thread("t")))
        assert [t.checkpoint["channel_values"] for t in chain] == [{"count": n} for n in range(40, 0, -1)]
        assert [t.pending_writes for t in chain] == [[(f"task-{n}", "count", n)] for n in range(40, 0, -1)]


def test_two_writes_to_one_thread_take_turns_and_neither_is_lost(address, tmp_path: Path, group: str) -> None:
    store = GatedStore(tmp_path, gate=b"blocked")
    with RaftpointSaver(address, store, group=group) as saver:
        c0, v0 = step(None, {"a": 0}, 0)
        store.waiting.set()  # the thread's first head passes the gate
        base = saver.put(thread("blocked"), c0, {}, v0)
        store.waiting.clear()
        (ca, va), (cb, vb) = step(c0, {"a": 1}, 1), step(c0, {"a": 2}, 1)
        first = threading.Thread(target=saver.put, args=(base, ca, {}, va))
        first.start()
        assert store.waiting.wait(30), "the first write's head was never written"
        second = threading.Thread(target=saver.put, args=(base, cb, {}, vb))
        second.start()
        second.join(2)  # a second write that did not wait for the first would be done by now
        store.release.set()
        first.join(30)
        second.join(30)
        assert {t.checkpoint["id"] for t in saver.list(thread("blocked"))} == {c0["id"], ca["id"], cb["id"]}


def queue_behind_the_gate(saver: RaftpointSaver, store: GatedStore, writes: list[Callable[[], Any]]) -> None:
    """Run `writes` to thread "blocked" each in its own thread: the first one's head
    waits at the gate until the others wait behind it, then all go on."""
    writers = [threading.Thread(target=write) for write in writes]
    writers[0].start()
    assert store.waiting.wait(30), "the first write's head was never written"
    for writer in writers[1:]:
        writer.start()
    wait_until(lambda: saver.threads.unacknowledged("blocked") == len(writes),
               lambda: f"{saver.threads.unacknowledged('blocked')} writes waiting, not {len(writes)}")
    store.release.set()
    for writer in writers:
        writer.join(30)


def test_writes_queued_behind_a_commit_of_their_thread_go_out_in_one_commit(address, tmp_path: Path,
                                                                            group: str) -> None:
    """What LangGraph does in a step (each task's put_writes from its own worker): while
    the thread's head is being committed, the writes that arrive wait and then go out
    together, each call returning once a commit holding it is acknowledged."""
    store = GatedCountingStore(tmp_path, gate=b"blocked")
    tasks = [f"task-{n}" for n in range(4)]
    with RaftpointSaver(address, store, group=group) as saver:
        c0, v0 = step(None, {"a": 0}, 0)
        store.waiting.set()  # the thread's first head passes the gate
        head = saver.put(thread("blocked"), c0, {}, v0)
        store.waiting.clear()
        heads_before = store.puts
        queue_behind_the_gate(saver, store, [partial(saver.put_writes, head, [("a", n)], task)
                                             for n, task in enumerate(tasks)])
        assert store.puts - heads_before == 2, f"{store.puts - heads_before} heads written for {len(tasks)} writes"
    with RaftpointSaver(address, tmp_path, group=group) as reader:  # a new process, say
        assert reader.get_tuple(head).pending_writes == [(task, "a", n) for n, task in enumerate(tasks)]


def test_every_write_of_a_refused_commit_raises_and_none_of_them_is_stored(address, tmp_path: Path,
                                                                          group: str) -> None:
    store = GatedStore(tmp_path, gate=b"blocked")
    with RaftpointSaver(address, store, group=group) as first, RaftpointSaver(address, tmp_path, group=group) as second:
        c0, v0 = step(None, {"a": 0}, 0)
        store.waiting.set()  # the thread's first head passes the gate
        head = first.put(thread("blocked"), c0, {}, v0)
        store.waiting.clear()
        second.put_writes(head, [("a", "taken")], "task-second")  # takes the thread over
        refused: list[BaseException] = []

        def write(n: int) -> None:
            try:
                first.put_writes(head, [("a", n)], f"task-{n}")
            except ThreadFenced as exc:
                refused.append(exc)

        queue_behind_the_gate(first, store, [partial(write, n) for n in range(3)])
        assert len(refused) == 3, f"{len(refused)} of 3 writes refused: {refused}"
        assert second.get_tuple(head).pending_writes == [("task-second", "a", "taken")]
        with pytest.raises(ThreadFenced):
            first.put_writes(head, [("a", "later")], "task-later")


class FirstFormat:
    """A thread as the first format stored it: one record holding the whole thread."""

    def __init__(self, saver: RaftpointSaver, thread_id: str, values: dict[str, str]) -> None:
        self.thread_id = thread_id
        checkpoint, _ = step(None, {}, 0)
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        self.checkpoint_id = checkpoint["id"]
        self.doc = {"thread_id": thread_id,
                    "checkpoints": {"": {checkpoint["id"]: {
                        "c": typed_to_json(saver.serde.dumps_typed({**bare, "channel_versions": {"a": 1}})),
                        "m": typed_to_json(saver.serde.dumps_typed({"step": 0})), "p": None, "v": {"a": "1"}}}},
                    "values": {"": {"a": {"1": saver.blobs.put(b"msgpack\n" + saver.serde.dumps_typed(
                        values["a"])[1]).uri}}},
                    "writes": {"": {checkpoint["id"]: [["task", 0, "a", typed_to_json(
                        saver.serde.dumps_typed("w")), "~0"]]}}}

    def to_json(self) -> dict[str, Any]:
        return self.doc


def test_a_thread_of_the_first_format_is_read_and_its_next_write_moves_it_into_segments(
        address, tmp_path: Path, group: str) -> None:
    with RaftpointSaver(address, tmp_path, group=group) as old:
        first = FirstFormat(old, "t", {"a": "x" * 2000})
        old.threads.change("t", lambda _: first)  # type: ignore[arg-type,return-value]
    with RaftpointSaver(address, tmp_path, group=group, seal_after=1) as saver:
        found = saver.get_tuple(thread("t"))
        assert found.checkpoint["channel_values"] == {"a": "x" * 2000}
        assert found.pending_writes == [("task", "a", "w")]
        c2, v2 = step(found.checkpoint, {"a": "y"}, 1)
        saver.put(found.config, c2, {}, v2)
        assert saver.threads.read("t").sealed is not None
    with RaftpointSaver(address, tmp_path, group=group) as reader:
        chain = list(reader.list(thread("t")))
        assert [t.checkpoint["channel_values"] for t in chain] == [{"a": "y"}, {"a": "x" * 2000}]
        assert chain[1].pending_writes == [("task", "a", "w")]


class Counter(TypedDict):
    total: Annotated[int, operator.add]
    log: Annotated[list[str], operator.add]


def _graph(saver: RaftpointSaver):
    builder = StateGraph(Counter)
    builder.add_node("double", lambda s: {"total": s["total"], "log": ["double"]})
    builder.add_node("inc", lambda s: {"total": 1, "log": ["inc"]})
    builder.add_edge(START, "double")
    builder.add_edge("double", "inc")
    builder.add_edge("inc", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_resumes_its_thread_in_a_new_saver(address, tmp_path: Path, group: str) -> None:
    config = {"configurable": {"thread_id": "counter"}}
    with RaftpointSaver(address, tmp_path, group=group) as saver:
        assert _graph(saver).invoke({"total": 1, "log": []}, config) == {"total": 3, "log": ["double", "inc"]}
    with RaftpointSaver(address, tmp_path, group=group) as restarted:  # a new process, say
        graph = _graph(restarted)
        assert graph.get_state(config).values == {"total": 3, "log": ["double", "inc"]}
        assert graph.invoke({"total": 0, "log": []}, config)["total"] == 7
        assert len(list(restarted.list(config))) == 8


def test_pending_writes_come_back_in_writes_sort_key_order(address, tmp_path: Path, group: str) -> None:
    with RaftpointSaver(address, tmp_path, group=group) as saver:
        c1, v1 = step(None, {"a": 1}, 0)
        head = saver.put(thread("t"), c1, {}, v1)
        saver.put_writes(head, [("a", "late")], "task-b", "~1")
        saver.put_writes(head, [("a", "first"), ("b", "second")], "task-a", "~0")
        assert saver.get_tuple(head).pending_writes == [("task-a", "a", "first"), ("task-a", "b", "second"),
                                                          ("task-b", "a", "late")]
