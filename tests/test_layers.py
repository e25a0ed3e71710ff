"""Imports point down the layers only, computed from the code against ARCHITECTURE.md.

The layer table lives in ARCHITECTURE.md (one place for the rule); this test parses it,
reads every module's imports with `ast` (those inside functions too: a lazy import is
still a dependency), and fails on any import the table does not allow, on a cycle
between packages or between modules, and on a module that belongs to no layer.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("coordinator", "agent_client", "chaos", "raftpoint")
ROW = re.compile(r"^\|\s*([a-z_]+)\s*\|(.*)\|(.*)\|\s*$")
SERVER_ONLY = {"pysyncobj", "lmdb", "prometheus_client", "structlog"}


@dataclass(frozen=True)
class Layer:
    name: str
    prefixes: tuple[str, ...]
    may_import: frozenset[str]


def parse_layers(text: str) -> list[Layer]:
    """The rows after the `layers` marker: | name | `module`, ... | layer, ... |."""
    lines = text.split("<!-- layers:", 1)[1].splitlines()[1:]
    layers = []
    for line in lines:
        if not line.startswith("|"):
            if layers:
                break
            continue
        m = ROW.match(line)
        if not m or m.group(1) == "layer" or set(m.group(2).strip()) <= {"-", "|"}:
            continue
        prefixes = tuple(re.findall(r"`([\w.]+)`", m.group(2)))
        allowed = frozenset(w.strip() for w in m.group(3).split(",") if w.strip())
        layers.append(Layer(m.group(1), prefixes, allowed))
    return layers


LAYERS = parse_layers((ROOT / "ARCHITECTURE.md").read_text())


def layer_of(module: str, layers: list[Layer] = LAYERS) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for prefix in layer.prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def module_files(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules `name` imports: `from a import b` counts as a.b when that is a module."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                targets.add(full if full in known else module)
    return {t for t in targets if t.split(".")[0] in PACKAGES}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def upward_imports(graph: dict[str, set[str]], layers: list[Layer] = LAYERS) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        own = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if own is None or theirs is None:
                continue  # reported by test_every_module_has_a_layer
            if theirs.name != own.name and theirs.name not in own.may_import:
                problems.append(f"{module} ({own.name}) imports {target} ({theirs.name})")
    return problems


def package_of(module: str, packages: set[str]) -> str:
    """The package a module sits in (a package is its own): cycles are looked for between these."""
    return module if module in packages or "." not in module else module.rsplit(".", 1)[0]


def package_cycles(graph: dict[str, set[str]], packages: set[str]) -> list[list[str]]:
    """Cycles between packages, leaving out a package and its own subpackages."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        a = package_of(module, packages)
        for target in targets:
            b = package_of(target, packages)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                edges.setdefault(a, set()).add(b)
    return cycles(edges)


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between modules. A cycle hidden behind an import inside a function is one
    too: the two modules still cannot be understood, tested or moved apart."""
    return cycles({module: {t for t in targets if t != module} for module, targets in graph.items()})


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


GRAPH = import_graph()
PACKAGE_NAMES = {name for name, path in module_files().items() if path.name == "__init__.py"}


def test_the_layer_table_parses() -> None:
    names = [layer.name for layer in LAYERS]
    assert names[0] == "applications" and names[-1] == "contract" and len(set(names)) == len(names) >= 8
    for layer in LAYERS:
        assert layer.prefixes, f"layer {layer.name} names no module"
        assert layer.may_import <= set(names), f"layer {layer.name} may import an unknown layer"


def test_every_module_has_a_layer() -> None:
    assert [m for m in GRAPH if layer_of(m) is None] == []


def test_no_import_points_up_a_layer() -> None:
    assert upward_imports(GRAPH) == []


def test_no_cycle_between_packages() -> None:
    assert package_cycles(GRAPH, PACKAGE_NAMES) == []


def test_no_cycle_between_modules() -> None:
    found = module_cycles(GRAPH)
    assert found == [], f"modules importing each other (move what both need below them): {found}"


def test_core_is_stdlib_only() -> None:
    for name, path in module_files().items():
        if layer_of(name).name != "contract" or not name.startswith("coordinator.core"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            roots = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for root in (r.split(".")[0] for r in roots):
                assert root in sys.stdlib_module_names or root == "coordinator", f"{name} imports {root}"


def test_agent_client_loads_no_server_dependency() -> None:
    """Import every agent_client module (computed, not listed) in a fresh interpreter."""
    modules = sorted(m for m in GRAPH if m.split(".")[0] == "agent_client")
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            f"bad = sorted(set({sorted(SERVER_ONLY)!r}) & {{m.split('.')[0] for m in sys.modules}})\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the checker itself must be able to fail --------------------------------------

TOY = """<!-- layers: -->
| layer | modules | may import |
|---|---|---|
| top | `app` | bottom |
| bottom | `lib` | |
"""


def test_an_upward_import_is_reported() -> None:
    layers = parse_layers(TOY)
    assert upward_imports({"lib.x": {"app.y"}, "app.y": {"lib.x"}}, layers) == ["lib.x (bottom) imports app.y (top)"]
    assert upward_imports({"app.y": {"lib.x"}}, layers) == []


def test_a_cycle_is_reported() -> None:
    graph = {"coordinator.transport.a": {"coordinator.service.b"}, "coordinator.service.b": {"coordinator.transport.c"}}
    packages = {"coordinator.transport", "coordinator.service"}
    assert package_cycles(graph, packages) == [["coordinator.service", "coordinator.transport"]]
    assert package_cycles({"coordinator.transport.a": {"coordinator.service.b"}}, packages) == []


def test_a_module_cycle_is_reported() -> None:
    graph = {"core.a": {"core.b"}, "core.b": {"core.c"}, "core.c": {"core.a", "core.c"}, "core.d": {"core.a"}}
    assert module_cycles(graph) == [["core.a", "core.b", "core.c"]]
    assert module_cycles({"core.a": {"core.b", "core.a"}}) == []  # importing itself is no cycle


@pytest.mark.parametrize("source, expected", [
    ("from coordinator import fsutil\n", {"coordinator.fsutil"}),
    ("def f():\n    from coordinator.transport.server import serve\n", {"coordinator.transport.server"}),
    ("from . import sibling\n", {"coordinator.storage.sibling"}),
    ("import json\n", set()),
])
def test_imports_are_read_from_the_code(tmp_path: Path, source: str, expected: set[str]) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = {"coordinator.fsutil", "coordinator.storage.sibling", "coordinator.transport.server"}
    assert imports_of("coordinator.storage.mod", path, known) == expected
