"""The transport sits below the node's services: it defines what it needs from them
(coordinator.transport.leases.Leases) and is composed with them from above
(coordinator.service.node_server), so it never imports them; nor does anything below it."""
from __future__ import annotations

import ast
from pathlib import Path

import coordinator

ROOT = Path(coordinator.__file__).parent
BELOW_SERVICE = ("transport", "replication", "storage", "core")


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement anywhere in the file names, local imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_below_the_services_imports_them() -> None:
    offenders = {
        str(path.relative_to(ROOT.parent)): sorted(n for n in imported_modules(path) if n.startswith("coordinator.service"))
        for package in BELOW_SERVICE for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: names for path, names in offenders.items() if names} == {}
    assert len(offenders) > 10  # the scan saw the packages


def test_the_scan_sees_local_imports() -> None:
    assert "coordinator.service.node_server" in imported_modules(ROOT / "harness" / "in_process.py")
