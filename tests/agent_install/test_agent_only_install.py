"""What an agent-only install says when a part of the full one is missing.

That raftpoint-agent installs and runs without the server's dependencies is
test_agent_sdist_on_cluster.py's (from its sdist, in a fresh virtualenv, on a cluster).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_langgraph_module_says_what_to_install_when_langgraph_is_missing(tmp_path: Path) -> None:
    blocker = tmp_path / "langgraph"  # a package that hides the installed LangGraph
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError('no LangGraph here', name='langgraph')\n")
    code = "import agent_client.langgraph"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": ""}, cwd=tmp_path)
    assert result.returncode == 1
    assert "pip install 'raftpoint[langgraph]'" in result.stderr
