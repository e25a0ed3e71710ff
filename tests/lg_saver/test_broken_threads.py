"""One group, several savers each with its own blob store: a thread one saver cannot read
(its blobs missing, damaged, or in another store) fails only when it is asked for, and
can still be deleted and started anew; raftpoint gc collects each store on its own."""
from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from agent_client import blob_gc, testing  # noqa: E402
from agent_client.blobstore import LocalBlobStore  # noqa: E402
from agent_client.langgraph import RaftpointSaver, ThreadUnreadable  # noqa: E402
from agent_client.langgraph.threads import thread_agent_id  # noqa: E402
from coordinator import channels  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from tests.lg_saver.saver_steps import step, thread  # noqa: E402

SKIPPING = "skipping a LangGraph thread"


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with testing.coordinator() as running, channels.environment(running.client_tls()):
        yield running.address


@pytest.fixture
def group() -> str:
    return f"lg-{uuid.uuid4().hex[:8]}"


def blob_store(root: Path) -> LocalBlobStore:
    """A store that writes even a small thread head as a blob: what these savers cannot
    read of each other's threads (a head held inline every saver reads)."""
    return LocalBlobStore(root, inline_max_bytes=0)


def write(saver: RaftpointSaver, thread_id: str, steps: int, run_id: str) -> None:
    """`steps` checkpoints on the thread, each with a pending write, all of run `run_id`."""
    base, config = None, thread(thread_id)
    for n in range(1, steps + 1):
        base, versions = step(base, {"count": n, "who": thread_id}, n)
        config = saver.put(config, base, {"step": n, "run_id": run_id}, versions)
        saver.put_writes(config, [("count", n)], f"task-{n}")


def ids(saver: RaftpointSaver, config: Any = None, **kw: Any) -> list[tuple[str, int]]:
    """(thread, step) of each checkpoint `list` yields."""
    return [(t.config["configurable"]["thread_id"], t.metadata["step"]) for t in saver.list(config, **kw)]


def head_uris(saver: RaftpointSaver, thread_id: str) -> list[str]:
    """The blob URIs of the heads the coordinator holds for the thread."""
    resp = saver.conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
        group=saver.threads.group, agent_id=thread_agent_id(thread_id)))
    return [m.blob_uri for m in resp.checkpoints]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and SKIPPING in r.getMessage()]


def test_a_thread_in_another_store_is_left_out_of_walks_and_fails_only_when_asked_for(
        address: str, tmp_path: Path, group: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agent_client")
    with RaftpointSaver(address, blob_store(tmp_path / "a"), group=group) as a, \
            RaftpointSaver(address, blob_store(tmp_path / "b"), group=group) as b:
        write(a, "ta", 2, "run-a")
        write(b, "tb", 2, "run-b")
        assert ids(a) == [("ta", 2), ("ta", 1)]
        assert ids(a, filter={"run_id": "run-a"}, limit=1) == [("ta", 2)]
        assert ids(b) == [("tb", 2), ("tb", 1)]
        seen = warnings(caplog)
        assert len(seen) == 2 and thread_agent_id("tb") in seen[0] and thread_agent_id("ta") in seen[1], seen
        b.put_writes(b.get_tuple(thread("tb")).config, [("count", 9)], "task-late")  # a new head of tb
        assert ids(a) == [("ta", 2), ("ta", 1)]
        assert len(warnings(caplog)) == 2, f"a thread is warned about once: {warnings(caplog)}"
        assert a.get_tuple(thread("ta")).metadata["step"] == 2
        with pytest.raises(ThreadUnreadable, match="not a manifest of this blob store"):
            a.get_tuple(thread("tb"))
        with pytest.raises(ThreadUnreadable, match="'tb'"):
            list(a.list(thread("tb")))
        base = b.get_tuple(thread("tb"))
        checkpoint, versions = step(base.checkpoint, {"count": 3}, 3)
        with pytest.raises(ThreadUnreadable, match="'tb'"):
            a.put(base.config, checkpoint, {"step": 3}, versions)
        b.put_writes(base.config, [("count", 10)], "task-after")  # b still writes tb: a did not take it over
        a.delete_for_runs(["run-a", "run-b"])  # a cannot read tb: its runs stay
        assert ids(a) == [] and ids(b) == [("tb", 2), ("tb", 1)]
        a.delete_thread("tb")  # unreadable here, deleted all the same; its blobs stay for store b's gc
        assert a.get_tuple(thread("tb")) is None
        assert any("its blobs are in another blob store" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize("harm", ["missing", "damaged"])
def test_a_thread_whose_head_is_gone_breaks_no_other_and_can_be_deleted_and_restarted(
        address: str, tmp_path: Path, group: str, harm: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agent_client")
    store = blob_store(tmp_path / "b")
    with RaftpointSaver(address, blob_store(tmp_path / "a"), group=group) as a, \
            RaftpointSaver(address, store, group=group) as b:
        write(a, "ta", 2, "run-a")
        write(b, "tb", 2, "run-b")
        write(b, "broken", 2, "run-x")
    for uri in head_uris(a, "broken"):
        path = store.backend.root / store.backend.key_for_uri(uri)
        if harm == "missing":
            path.unlink()
        else:
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 1
            path.write_bytes(bytes(data))
    with RaftpointSaver(address, store, group=group) as b:  # a new process: nothing of the thread in memory
        assert ids(b) == [("tb", 2), ("tb", 1)]
        assert ids(b, filter={"run_id": "run-b"}) == [("tb", 2), ("tb", 1)]
        assert b.get_tuple(thread("tb")).checkpoint["channel_values"] == {"count": 2, "who": "tb"}
        b.delete_for_runs(["run-x"])
        assert any(thread_agent_id("broken") in w for w in warnings(caplog)), warnings(caplog)
        with pytest.raises(ThreadUnreadable, match="delete_thread starts it anew"):
            b.get_tuple(thread("broken"))
        b.delete_thread("broken")
        assert b.get_tuple(thread("broken")) is None
        write(b, "broken", 1, "run-y")
        assert ids(b, thread("broken")) == [("broken", 1)]
        b.delete_for_runs(["run-b"])
        assert ids(b) == [("broken", 1)]


def test_the_writer_whose_store_lost_a_thread_walks_the_group_and_deletes_it(
        address: str, tmp_path: Path, group: str) -> None:
    """The writer still holds the thread's head in memory; its segments and values are gone."""
    with RaftpointSaver(address, blob_store(tmp_path / "a"), group=group, seal_after=1, inline_max=0) as a, \
            RaftpointSaver(address, blob_store(tmp_path / "b"), group=group) as b:
        write(a, "lost", 3, "run-l")
        write(b, "kept", 2, "run-k")
        shutil.rmtree(tmp_path / "a")
        assert ids(a) == [] and ids(b) == [("kept", 2), ("kept", 1)]
        with pytest.raises(ThreadUnreadable, match="'lost'"):
            a.get_tuple(thread("lost"))
        a.delete_for_runs(["run-l"])
        a.delete_thread("lost")
        write(a, "lost", 1, "run-l2")
        assert a.get_tuple(thread("lost")).checkpoint["channel_values"] == {"count": 1, "who": "lost"}
        assert ids(a) == [("lost", 1)]


def test_gc_against_one_store_leaves_the_other_stores_checkpoints_for_their_own_run(
        address: str, tmp_path: Path, group: str) -> None:
    stores = {name: blob_store(tmp_path / name) for name in ("a", "b")}
    savers = {name: RaftpointSaver(address, store, group=group, seal_after=2, inline_max=0)
              for name, store in stores.items()}
    try:
        for name, saver in savers.items():
            write(saver, f"t{name}", 6, f"run-{name}")
        before_b = {p.name for p in (tmp_path / "b" / "manifests").iterdir()}
        report = blob_gc.collect(savers["a"].conn, stores["a"], [group], grace_s=0)
        assert report.foreign == [] and len(report.released[group]) == 11, report  # a head per put and put_writes
        assert {p.name for p in (tmp_path / "b" / "manifests").iterdir()} == before_b
        assert len(head_uris(savers["b"], "tb")) == 12, "store b's checkpoints are no longer recorded"
        report = blob_gc.collect(savers["b"].conn, stores["b"], [group], grace_s=0)
        assert report.foreign == [] and report.result.manifests_removed == 11, report
        for name in stores:
            with RaftpointSaver(address, blob_store(tmp_path / name), group=group) as reader:
                assert ids(reader, thread(f"t{name}")) == [(f"t{name}", n) for n in range(6, 0, -1)]
    finally:
        for saver in savers.values():
            saver.close()
