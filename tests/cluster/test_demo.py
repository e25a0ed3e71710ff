"""The README's main job, and the demo's own consistency check."""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.demo_agents import Message, World


@pytest.mark.cluster
def test_demo_runs_and_conserves_tokens(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "demo", "--rounds", "12", "--seed", "5",
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("CRASH") == 2
    assert proc.stdout.count("matches what-if: True") == 2
    assert "NOT CONSERVED" not in proc.stdout


def test_demo_detects_an_inconsistent_line(tmp_path: Path) -> None:
    world = World(conn=None, group="g", mode=pb.CIC_BCS, agents=["a", "b"], tokens=10, blob_dir=tmp_path,  # type: ignore[arg-type]
                  rng=random.Random(1))
    world.delivered.append(Message("m1", "a", 2, "b", 3, b"", 0, receive_interval=1))
    with pytest.raises(RuntimeError, match="orphan"):
        world._fix_channels({"a": 1})  # a forgets sending m1 while b keeps having received it
    world._fix_channels({"a": 1, "b": 0})  # rolling b back too makes the line consistent
    assert world.delivered == [] and world.in_flight == []
