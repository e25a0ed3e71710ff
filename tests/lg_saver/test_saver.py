"""RaftpointSaver beyond the conformance suite: fencing, incremental uploads, idempotent writes, a real graph."""
from __future__ import annotations

import operator
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")
from langgraph.graph import END, START, StateGraph  # noqa: E402

from agent_client import testing  # noqa: E402
from agent_client.blobstore import LocalBlobStore  # noqa: E402
from agent_client.langgraph import RaftpointSaver, ThreadFenced  # noqa: E402
from coordinator import channels  # noqa: E402
from tests.lg_saver.saver_steps import step, thread  # noqa: E402


class CountingStore(LocalBlobStore):
    """A blob store that counts what it is asked to store."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts = 0

    def put(self, data: bytes, **kw: Any):
        self.puts += 1
        return super().put(data, **kw)


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
        c1, v1 = step(None, {"a": "x" * 1000, "b": 1}, 0)
        head = saver.put(thread("t"), c1, {}, v1)
        before = store.puts
        c2, v2 = step(c1, {"b": 2}, 1)
        saver.put(head, c2, {}, v2)
        assert store.puts - before == 2  # channel b's new value, and the thread's record
        assert saver.get_tuple(thread("t")).checkpoint["channel_values"] == {"a": "x" * 1000, "b": 2}


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
