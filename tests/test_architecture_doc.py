"""ARCHITECTURE.md's "Life of a CommitCheckpoint" names real code.

The section walks a checkpoint through the modules by their dotted names; each must
import, so a rename or a move that leaves the text behind fails here instead of
leaving readers a path that no longer exists.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Life of a CommitCheckpoint"
# Backticked dotted names rooted in one of the project's packages.
DOTTED_NAME = re.compile(r"`((?:coordinator|agent_client)(?:\.[A-Za-z_]\w*)+)`")
# Enough hops that a section emptied or reworded out of the dotted form fails too.
MIN_NAMES = 30


def section(text: str, title: str) -> str:
    """The body of the `## ` section `title`, up to the next `## ` heading."""
    _, found, body = text.partition(f"\n{title}\n")
    assert found, f"ARCHITECTURE.md has no section {title!r}"
    return body.split("\n## ", 1)[0]


def resolve(name: str) -> object:
    """The object a dotted name denotes: the longest importable module prefix, then
    attributes. Raises ImportError or AttributeError when there is none."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(f"no module in {name}")


def unresolved(names: list[str]) -> list[str]:
    """The names that do not resolve, each with why."""
    missing = []
    for name in names:
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    return missing


def test_every_name_in_the_life_of_a_commit_checkpoint_exists() -> None:
    names = sorted(set(DOTTED_NAME.findall(section((ROOT / "ARCHITECTURE.md").read_text(), SECTION))))
    assert len(names) >= MIN_NAMES, f"only {len(names)} dotted names in the section: {names}"
    missing = unresolved(names)
    assert not missing, "ARCHITECTURE.md names code that does not exist:\n" + "\n".join(missing)


def test_a_wrong_name_is_reported() -> None:
    assert unresolved(["coordinator.replication.node.CoordinatorNode.apply_entry"]) == []
    assert unresolved(["coordinator.replication.node.CoordinatorNode.apply_entries",
                       "coordinator.replication.nodes.CoordinatorNode"]) == [
        "coordinator.replication.node.CoordinatorNode.apply_entries "
        "(AttributeError: type object 'CoordinatorNode' has no attribute 'apply_entries')",
        "coordinator.replication.nodes.CoordinatorNode "
        "(AttributeError: module 'coordinator.replication' has no attribute 'nodes')"]
