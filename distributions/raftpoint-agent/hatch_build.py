"""What raftpoint-agent ships: the agent library and the part of the coordinator tree it imports.

The files stay where the repository keeps them (two folders up), so the project cannot
select them from its own root. Its sdist copies them to the sdist's root, so a wheel
builds from the sdist alone; a wheel built from the checkout takes them from the
repository. The server distribution (the repository root's hatch_build.py) ships the
rest of the coordinator tree and imports `SHIPS` from here, so the split is written once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Relative to the repository root. Of the coordinator tree, only what agent_client imports:
# the contract (core, api), fsutil, locks (the blob store's shared/exclusive lock),
# channels (a client's TLS channel; grpcio only), endpoint_diagnosis (why one cannot be
# opened; the standard library's ssl) and endpoints_file (which it reads) and tracing
# (trace context, when the otel extra is installed). coordinator/__init__.py is here: it owns the package.
SHIPS = (
    "agent_client",
    "coordinator/__init__.py",
    "coordinator/py.typed",
    "coordinator/fsutil.py",
    "coordinator/locks.py",
    "coordinator/channels.py",
    "coordinator/tracing.py",
    "coordinator/endpoint_diagnosis.py",
    "coordinator/endpoints_file.py",
    "coordinator/api",
    "coordinator/core",
)
# Modules, stubs and the PEP 561 marker: a stray file in a checkout never ships.
SHIPPED_SUFFIXES = frozenset({".py", ".pyi", ".typed"})


def shipped_files(source_root: Path, paths: tuple[str, ...]) -> dict[str, str]:
    """Each file under `paths` (files or folders below `source_root`) -> its path in the distribution."""
    found: dict[str, str] = {}
    for relative in paths:
        path = source_root / relative
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: nothing to ship for {relative}")
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file() and file.suffix in SHIPPED_SUFFIXES and "__pycache__" not in file.parts:
                found[str(file)] = file.relative_to(source_root).as_posix()
    return found


def source_root(project_root: Path) -> Path:
    """Where the shipped files are: an unpacked sdist (it has PKG-INFO) holds them; else the repository."""
    return project_root if (project_root / "PKG-INFO").is_file() else project_root.parents[1]


class AgentFiles(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return  # dev-mode-dirs puts the repository on the path
        root = Path(self.root)
        source = source_root(root)
        build_data["force_include"].update(shipped_files(source, SHIPS))
        if self.target_name == "sdist" and source != root:
            # The wheel built from the sdist then finds it as its license file.
            build_data["force_include"][str(source / "LICENSE")] = "LICENSE"
