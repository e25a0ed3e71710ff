"""What raftpoint (the server distribution) ships, and its dependency on raftpoint-agent.

The server ships the coordinator tree without the part raftpoint-agent ships (that
split is written once, in the agent distribution's hatch_build.py), the `raftpoint`
console and the chaos suite, and requires raftpoint-agent of its own version: no file
is in both wheels, and the two are always installed together at one release.

An editable install puts this checkout on the path, which holds the agent library
too, so it requires the agent's own dependencies in place of the agent distribution
(whose files it already has, at this checkout's version).
"""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from packaging.markers import Marker
from packaging.requirements import Requirement

AGENT_PROJECT = Path("distributions") / "raftpoint-agent"
AGENT_NAME = "raftpoint-agent"
SERVER_TREES = ("coordinator", "raftpoint", "chaos")


def _agent_build(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("raftpoint_agent_build", root / AGENT_PROJECT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _for_extra(requirement: str, extra: str) -> str:
    """`requirement` needed only with `extra`, keeping any marker it had."""
    req = Requirement(requirement)
    own = f"({req.marker}) and " if req.marker else ""
    req.marker = Marker(f"{own}extra == '{extra}'")
    return str(req)


def extras_of(agent_extras: list[str]) -> dict[str, list[str]]:
    """Each server extra -> the agent extras it brings: its namesake, and `dev` (the tests) all of them."""
    return {**{extra: [extra] for extra in agent_extras}, "dev": list(agent_extras)}


def editable_requirements(agent_project: dict[str, Any]) -> list[str]:
    """The agent distribution's requirements, and its extras' under the server extras that bring them."""
    optional = agent_project.get("optional-dependencies", {})
    return [*agent_project.get("dependencies", []),
            *(_for_extra(requirement, extra) for extra, wanted in extras_of(list(optional)).items()
              for agent_extra in wanted for requirement in optional[agent_extra])]


def agent_requirements(version: str, agent_extras: list[str]) -> list[str]:
    """raftpoint-agent at exactly this release, with its extras under the server extras that bring them."""
    return [f"{AGENT_NAME}=={version}",
            *(_for_extra(f"{AGENT_NAME}[{','.join(wanted)}]=={version}", extra)
              for extra, wanted in extras_of(agent_extras).items())]


class ServerFiles(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        agent_project = tomllib.loads((root / AGENT_PROJECT / "pyproject.toml").read_text())["project"]
        agent_extras = list(agent_project.get("optional-dependencies", {}))
        missing = [e for e in extras_of(agent_extras) if e not in self.metadata.core.optional_dependencies]
        if missing:
            raise ValueError(f"pyproject.toml must declare the extras {missing} (the agent's are filled in here)")
        if version == "editable":
            build_data["dependencies"].extend(editable_requirements(agent_project))
            return
        build_data["dependencies"].extend(agent_requirements(self.metadata.version, agent_extras))
        if self.target_name == "wheel":
            agent = _agent_build(root)
            agent_files = agent.shipped_files(root, agent.SHIPS)
            server_files = agent.shipped_files(root, SERVER_TREES)
            build_data["force_include"].update({src: dst for src, dst in server_files.items() if src not in agent_files})
