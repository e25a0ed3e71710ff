"""An agent installs raftpoint-agent (distributions/raftpoint-agent) and none of the server's dependencies.

Builds the wheel, installs it into a fresh virtualenv, and from there runs the
quickstart against an in-process coordinator served by this (full) environment.
"""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from agent_client import testing

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("pysyncobj", "lmdb", "prometheus_client", "structlog")

CHECK = """
import importlib.util, runpy, sys
present = [m for m in {server_only!r} if importlib.util.find_spec(m) is not None]
assert not present, present
from agent_client import testing
try:
    testing.coordinator()
except testing.ServerNotInstalled as exc:
    assert "pip install" in str(exc)
else:
    raise AssertionError("the in-process coordinator needs the server")
quickstart = runpy.run_path({quickstart!r})
print(quickstart["run"]([{address!r}], {data_dir!r}))
"""


@pytest.mark.slow
def test_the_agent_package_runs_the_quickstart_without_server_dependencies(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(ROOT / "distributions" / "raftpoint-agent")], check=True, capture_output=True, timeout=300)
    env_dir = tmp_path / "agent-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", *map(str, wheels.glob("*.whl"))], check=True,
                   capture_output=True, timeout=600)
    with testing.coordinator() as running:
        code = CHECK.format(server_only=SERVER_ONLY, quickstart=str(ROOT / "examples" / "quickstart.py"),
                            address=running.address, data_dir=str(tmp_path / "data"))
        # The agent-only install finds the CA and its certificate in RAFTPOINT_CA_FILE etc.
        result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                                cwd=tmp_path, env={**os.environ, **running.client_tls().environment()})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'notes': ['outline the report']}"


def test_the_langgraph_module_says_what_to_install_when_langgraph_is_missing(tmp_path: Path) -> None:
    blocker = tmp_path / "langgraph"  # a package that hides the installed LangGraph
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError('no LangGraph here', name='langgraph')\n")
    code = "import agent_client.langgraph"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": ""}, cwd=tmp_path)
    assert result.returncode == 1
    assert "pip install 'raftpoint[langgraph]'" in result.stderr
