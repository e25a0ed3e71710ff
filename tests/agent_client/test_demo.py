"""`raftpoint demo` end to end: real cluster, agent processes, SIGKILL, recovery, token audit."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("mode", ["all", "hmnr"])
def test_demo_exits_0_and_conserves_tokens(tmp_path: Path, mode: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--agents", "3", "--mode", mode,
                           "--seconds", "4", "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases = 2 if mode == "all" else 1
    assert proc.stdout.count("CRASH: SIGKILL") == phases
    assert proc.stdout.count("matches what-if: True") == phases
    assert "NOT CONSERVED" not in proc.stdout and "every recovery conserved the tokens" in proc.stdout
    assert not list(tmp_path.glob("logs/*")) or all(p.stat().st_size < 1_000_000 for p in tmp_path.glob("logs/*"))


def test_demo_rejects_bad_arguments() -> None:
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--agents", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--agents" in proc.stderr
