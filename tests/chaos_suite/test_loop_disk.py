"""chaos.disk's LoopDisk: power cut keeps exactly what was durable, fill, throttle, cleanup."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chaos.disk import DiskFaultError, LoopDisk, in_private_mount_namespace, unavailable_reason
from tests.chaos_suite.disk_scenarios import run_in_namespace

pytestmark = pytest.mark.chaos

needs_disk_faults = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount namespaces are Linux only")
def test_mounting_outside_a_private_namespace_is_refused(tmp_path: Path) -> None:
    if in_private_mount_namespace():
        pytest.skip("the tests already run in a private mount namespace")
    disk = LoopDisk(tmp_path / "disk.img", tmp_path / "mnt", 32)
    with pytest.raises(DiskFaultError, match="private mount namespace"):
        disk.mount()
    disk.close()  # nothing was mounted: close is a no-op


@needs_disk_faults
def test_loop_disk_faults(tmp_path: Path) -> None:
    seen = run_in_namespace(tmp_path, "loop-disk")
    assert seen["write_after_cut"] == "EIO"
    # Only what reached the disk before the cut is there: "late" was written after the
    # last sync and never fsynced.
    assert seen["files_after_cycle"] == ["synced", "unsynced"] and seen["synced_intact"]
    assert 64 << 10 <= seen["free_after_fill"] < (64 << 10) + 4096
    assert seen["write_1mib_when_full"] == "ENOSPC"
    assert seen["free_after_unfill"] > 20 << 20
    assert seen["cgroup_while_throttled"].startswith("/raftpoint-disk-")
    assert seen["cgroup_after_unthrottle"] == "/"
    assert seen["loop_devices_left"] == "" and seen["cgroups_left"] == []
