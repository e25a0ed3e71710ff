"""examples/langgraph_team: three LangGraph agents, one killed mid-run, with raftpoint and with SqliteSaver."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_team_recovers_consistently_and_the_stock_saver_does_not() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "langgraph_team" / "run.py")],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("| ") and "crash" in line}
    # restarted, rolled back, tool calls, duplicated tool calls, processed twice, lost, answer as without crash
    assert rows["raftpoint, crash"][:7] == ["researcher", "writer", "4", "0", "0", "0", "yes"]
    stock = rows["SqliteSaver, crash"]
    assert stock[6] == "NO" and (int(stock[3]) > 0 or int(stock[4]) > 0)
