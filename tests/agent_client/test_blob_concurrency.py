"""One blob store written from many threads at once: puts overlap, garbage collection
waits for them, and a flush returns only once every file created before it is synced."""
from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agent_client.blobs import backend as backend_module
from agent_client.blobstore import DirectoryBackend, LocalBlobStore
from tests.support.meeting import DEADLINE_S, Meeting, finished_within

class MeetingBackend(DirectoryBackend):
    """A directory whose manifest creations wait until `meeting.size` of them are under way."""

    def __init__(self, root: Path, meeting: Meeting) -> None:
        super().__init__(root)
        self.meeting = meeting

    def create(self, key: str, data: Any) -> bool:
        if not key.startswith("manifests/"):
            return super().create(key, data)
        with self.meeting.attended():
            return super().create(key, data)


def test_puts_from_many_threads_are_under_way_at_once_and_each_reads_back(tmp_path: Path) -> None:
    writers = 8
    meeting = Meeting(writers)
    store = LocalBlobStore(backend=MeetingBackend(tmp_path, meeting), inline_max_bytes=0)
    states = [random.Random(seed).randbytes(3000) for seed in range(writers)]
    with ThreadPoolExecutor(writers) as pool:
        puts = list(pool.map(store.put, states))
    assert meeting.most == writers, f"at most {meeting.most} of {writers} puts were under way at once"
    assert [LocalBlobStore(tmp_path).get(p.uri) for p in puts] == states


def test_garbage_collection_waits_for_the_puts_under_way(tmp_path: Path) -> None:
    meeting = Meeting(2)  # one put: it waits inside until opened
    store = LocalBlobStore(backend=MeetingBackend(tmp_path, meeting), inline_max_bytes=0)
    with ThreadPoolExecutor(2) as pool:
        put = pool.submit(store.put, b"a state GC must not see half written")
        assert meeting.reached(1), "the put never reached its manifest"
        collect = pool.submit(store.collect_garbage)
        ran_beside = finished_within(collect, 0.5)
        meeting.open()
        uri = put.result(DEADLINE_S).uri
        collect.result(DEADLINE_S)
    assert not ran_beside, "garbage collection ran while a put was writing its manifest"
    assert store.get(uri) == b"a state GC must not see half written"


def test_a_flush_that_finds_its_files_taken_returns_only_once_they_are_synced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two flushes at once: the second finds the file it must make durable taken by the
    first, still syncing it; returning then would let a manifest name unsynced bytes."""
    backend = DirectoryBackend(tmp_path)
    syncing, release = threading.Event(), threading.Event()
    real_sync = backend_module.sync_files

    def slow_sync(files: Any, pool: Any) -> None:
        files = list(files)
        if files:
            syncing.set()
            assert release.wait(DEADLINE_S), "the first flush was never released"
        real_sync(files, pool)
    monkeypatch.setattr(backend_module, "sync_files", slow_sync)
    assert backend.create("packs/plain/one.pack", b"bytes a manifest will name")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(backend.flush)
        assert syncing.wait(DEADLINE_S), "the first flush never started syncing"
        second = pool.submit(backend.flush)
        returned_early = finished_within(second, 0.5)
        release.set()
        first.result(DEADLINE_S)
        second.result(DEADLINE_S)
    assert not returned_early, "a flush returned while the file created before it was still being synced"


def test_after_a_failed_sync_no_put_is_acknowledged_until_the_process_restarts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed fsync may leave the dirty pages dropped and marked clean, so a second
    sync of the same files succeeds with their bytes lost. A put that deduplicated
    against a file of the failed batch would then be acknowledged on nothing: every
    later flush fails instead, and a new store on the same directory works."""
    store = LocalBlobStore(tmp_path, inline_max_bytes=0)
    real_sync = backend_module.sync_files
    failures = iter([OSError(5, "Input/output error")])

    def failing_once(files: Any, pool: Any) -> None:
        error = next(failures, None)
        if error is not None:
            raise error
        real_sync(files, pool)
    monkeypatch.setattr(backend_module, "sync_files", failing_once)
    with pytest.raises(OSError, match="Input/output error"):
        store.put(b"a state whose sync fails")
    with pytest.raises(OSError) as later:
        store.put(b"a state written after the failure")
    assert "an earlier sync of the blob store" in str(later.value) and "restart" in str(later.value), later.value
    restarted = LocalBlobStore(tmp_path, inline_max_bytes=0)
    assert restarted.get(restarted.put(b"a state written by a new process").uri) == b"a state written by a new process"
