"""raftpoint-agent and raftpoint are two real distributions built from one repository.

Builds both sdists (PyPA's `build`, with each project's own backend), unpacks each alone into a
temporary folder and builds its wheel from there (so each sdist carries all it needs),
then checks that no file is in both wheels, that together they ship every module of
the four trees, that the server requires the agent at its own version, and that the
agent wheel, installed in a fresh virtualenv that sees only its declared dependency
closure (linked from this environment, no registry needed), imports every module it
ships while pysyncobj, LMDB, prometheus-client and structlog are not importable: first
with its base requirements alone (all but the LangGraph saver), then with its extras'.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.distributions import (AGENT_PROJECT, ROOT, SERVER_ONLY_MODULES, build_sdist, dependency_closure,
                                         show_only, site_packages)

TREES = ("coordinator", "agent_client", "raftpoint", "chaos")
SHIPPED_SUFFIXES = (".py", ".pyi", ".typed")
SERVER_ONLY = {"pysyncobj", "lmdb", "prometheus-client", "structlog"}
# Modules that import an extra's distribution when loaded (the blob store loads the S3 one on use).
EXTRA_ONLY_PACKAGES = ("agent_client.langgraph", "agent_client.blobs.s3")

IMPORT_ALL = """
import importlib, importlib.util, json, sys
modules = {modules!r}
for name in modules:
    importlib.import_module(name)
print(json.dumps({{
    "server_only_importable": [m for m in {server_only!r} if importlib.util.find_spec(m) is not None],
    "agent_client_file": importlib.import_module("agent_client").__file__,
    "imported": len(modules),
}}))
"""


def wheel_from_sdist(sdist: Path, work: Path) -> Path:
    """Unpack the sdist alone (nothing of the checkout beside it) and build its wheel there."""
    unpacked = work / sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    wheels = work / "wheels"
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                             "-w", str(wheels), str(unpacked)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = wheels.glob("*.whl")
    return wheel


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n for n in archive.namelist() if ".dist-info/" not in n}


def wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode())


def repository_modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for tree in TREES for p in (ROOT / tree).rglob("*")
            if p.is_file() and p.suffix in SHIPPED_SUFFIXES and "__pycache__" not in p.parts}


@pytest.mark.slow
def test_each_sdist_builds_its_wheel_alone_and_the_wheels_split_the_tree(tmp_path: Path) -> None:
    agent_sdist = build_sdist(AGENT_PROJECT, tmp_path / "agent-sdist")
    server_sdist = build_sdist(ROOT, tmp_path / "server-sdist")
    (tmp_path / "agent").mkdir()
    (tmp_path / "server").mkdir()
    agent_wheel = wheel_from_sdist(agent_sdist, tmp_path / "agent")
    server_wheel = wheel_from_sdist(server_sdist, tmp_path / "server")

    agent, server = wheel_files(agent_wheel), wheel_files(server_wheel)
    assert agent & server == set(), "in both wheels"
    assert agent | server == repository_modules(), "the wheels do not ship exactly the repository's modules"
    assert {"agent_client/py.typed", "coordinator/py.typed", "coordinator/__init__.py"} <= agent

    agent_meta, server_meta = wheel_metadata(agent_wheel), wheel_metadata(server_wheel)
    version = agent_meta["Version"]
    assert server_meta["Version"] == version
    assert f"raftpoint-agent=={version}" in server_meta.get_all("Requires-Dist")
    assert agent_meta["License-Expression"] == "Apache-2.0" and agent_meta.get_all("License-File") == ["LICENSE"]
    requires = agent_meta.get_all("Requires-Dist")
    names = {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in requires}
    assert names & SERVER_ONLY == set(), requires
    for requirement in map(Requirement, requires):  # a library states ranges; constraints.txt pins
        assert not any(s.operator == "==" for s in requirement.specifier), requirement

    # A fresh virtualenv: the agent wheel, and of this environment only the agent's dependency closure.
    env_dir = tmp_path / "agent-env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             "--no-index", str(agent_wheel)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    site = site_packages(env_dir)
    modules = sorted(f.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                     for f in agent if f.endswith(".py"))
    base = [m for m in modules if not m.startswith(EXTRA_ONLY_PACKAGES)]
    extras = set(agent_meta.get_all("Provides-Extra") or [])
    for label, wanted, importing in [("base", set(), base), ("extras", extras, modules)]:
        show_only(env_dir, dependency_closure(requires, wanted), tmp_path / f"deps-{label}")
        code = IMPORT_ALL.format(modules=importing, server_only=SERVER_ONLY_MODULES)
        run = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=180,
                             cwd=tmp_path)
        assert run.returncode == 0, f"{label} requirements: {run.stderr}"
        seen = json.loads(run.stdout)
        assert seen["server_only_importable"] == [], seen
        assert seen["agent_client_file"].startswith(str(site)), seen
        assert seen["imported"] == len(importing) > 60
