"""A large pack's bytes start for the disk while it is still being written
(fsutil.start_writeback), so the sync before its manifest waits for little more than its tail."""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from agent_client.blobs import backend as backend_module
from agent_client.blobstore import LocalBlobStore
from coordinator import fsutil

MIB = 1024 * 1024


def test_a_large_pack_is_written_behind_in_order_before_it_is_linked(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalBlobStore(tmp_path)
    data = random.Random(1).randbytes(24 * MIB)
    events: list[tuple[str, int, int]] = []
    real_start, real_link = fsutil.start_writeback, os.link

    def start(fd: int, offset: int, length: int) -> bool:
        events.append(("writeback", offset, length))
        return real_start(fd, offset, length)

    def link(src: str, dst: str, *args: object, **kw: object) -> None:
        events.append(("link " + Path(dst).parent.name, 0, 0))
        real_link(src, dst, *args, **kw)
    monkeypatch.setattr(fsutil, "start_writeback", start)
    monkeypatch.setattr(os, "link", link)
    put = store.put(data)
    ranges = [(offset, length) for kind, offset, length in events if kind == "writeback"]
    assert events.index(("link plain", 0, 0)) == len(ranges), events  # all of them before the pack's name exists
    assert ranges and ranges[0][0] == 0, ranges
    assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:])), ranges  # back to back
    assert all(n >= backend_module.WRITE_BEHIND for _, n in ranges), ranges
    assert sum(n for _, n in ranges) > len(data) - backend_module.WRITE_BEHIND - put.manifest.chunks[-1].size, ranges
    assert LocalBlobStore(tmp_path).get(put.uri) == data


def test_a_small_checkpoint_starts_no_writeback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(fsutil, "start_writeback", lambda fd, offset, length: calls.append(length) or True)
    LocalBlobStore(tmp_path).put(random.Random(2).randbytes(MIB))
    assert calls == []


@pytest.mark.skipif(sys.platform != "linux", reason="sync_file_range is Linux's")
def test_start_writeback_reaches_the_kernel(tmp_path: Path) -> None:
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * MIB)
        assert fsutil.start_writeback(f.fileno(), 0, MIB) is True
        assert fsutil.start_writeback(-1, 0, MIB) is False  # a failure is reported, not raised
