"""RaftpointSaver.fork_threads: a set of threads copied together into a new group,
read and continued there by a saver on it, while the original threads go on, and
garbage collection of the original group leaves the fork readable."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph")

from agent_client import blob_gc, testing  # noqa: E402
from agent_client.blobstore import LocalBlobStore  # noqa: E402
from agent_client.langgraph import RaftpointSaver  # noqa: E402
from coordinator import channels  # noqa: E402
from tests.lg_saver.saver_steps import step, thread  # noqa: E402


@pytest.fixture(scope="module")
def address():
    with testing.coordinator() as running, channels.environment(running.client_tls()):
        yield running.address


def _values(saver: RaftpointSaver, thread_id: str) -> list[dict]:
    """The thread's checkpoints' channel values, newest first."""
    return [t.checkpoint["channel_values"] for t in saver.list(thread(thread_id))]


def test_forked_threads_go_on_apart_from_the_originals_and_survive_their_collection(address, tmp_path: Path) -> None:
    group = f"lg-{uuid.uuid4().hex[:8]}"
    store = LocalBlobStore(tmp_path, inline_max_bytes=0)  # heads as blobs: the fork copies their manifests
    with RaftpointSaver(address, store, group=group, inline_max=0) as saver:
        heads = {}
        for name in ("t1", "t2", "t3"):
            base, versions = step(None, {"msgs": [f"{name} one"]}, 0)
            config = saver.put(thread(name), base, {"step": 0}, versions)
            base, versions = step(base, {"msgs": [f"{name} one", f"{name} two"]}, 1)
            heads[name] = (saver.put(config, base, {"step": 1}, versions), base)
        with pytest.raises(ValueError, match="thread 'nope' has no checkpoint to fork"):
            saver.fork_threads(["t1", "nope"], f"{group}-x")
        saver.fork_threads(["t1", "t2"], f"{group}-fork")
        config, base = heads["t1"]
        for n in (2, 3):
            base, versions = step(base, {"msgs": [f"original {n}"]}, n)
            config = saver.put(config, base, {"step": n}, versions)
        report = blob_gc.collect(saver.conn, store, [group], grace_s=0)
        assert report.result.manifests_removed > 0, report
        assert _values(saver, "t1")[0] == {"msgs": ["original 3"]}

    with RaftpointSaver(address, store, group=f"{group}-fork", inline_max=0) as fork:
        for name in ("t1", "t2"):
            assert _values(fork, name) == [{"msgs": [f"{name} one", f"{name} two"]}, {"msgs": [f"{name} one"]}]
        assert fork.get_tuple(thread("t3")) is None  # not forked
        config, base = heads["t1"]
        base, versions = step(base, {"msgs": ["in the fork"]}, 2)
        fork.put(fork.get_tuple(thread("t1")).config, base, {"step": 2}, versions)
        assert _values(fork, "t1")[0] == {"msgs": ["in the fork"]}
    with RaftpointSaver(address, store, group=group, inline_max=0) as original:
        assert _values(original, "t1")[0] == {"msgs": ["original 3"]}
