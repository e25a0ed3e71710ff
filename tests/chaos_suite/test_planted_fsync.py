"""skip-fsync: a power cut of every node loses acknowledged checkpoints only when fsync is skipped.

Runs tests/chaos_suite/power_cut.py in a private mount namespace (loop-device disks,
root only); skipped where chaos.disk or the machine cannot do that.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

disk = pytest.importorskip("chaos.disk", reason="chaos.disk (loop-device disks) is not available")
if (reason := disk.unavailable_reason()) is not None:
    pytest.skip(reason, allow_module_level=True)

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bug", [None, "skip-fsync"])
def test_a_power_cut_of_every_node_keeps_acknowledged_checkpoints_unless_fsync_is_skipped(
        tmp_path: Path, bug: str | None) -> None:
    argv = disk.private_mount_namespace_argv(
        [sys.executable, "-m", "tests.chaos_suite.power_cut", bug or "none", str(tmp_path)])
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["counts"]["acknowledged"] == 40, result
    if bug is None:
        assert result["ok"], result["examples"]
    else:
        assert not result["ok"] and result["counts"]["missing"] > 0, result["counts"]
