"""Building the distributions and installing one into a virtualenv that sees only what it declares.

No registry is asked: the sdist is built with this environment's build backend, and a
fresh virtualenv is shown (as symlinks in a folder named by a .pth file) exactly the
installed distributions a set of requirements needs, so a missing requirement fails
the import it would fail after `pip install` from an index.
"""
from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
AGENT_PROJECT = ROOT / "distributions" / "raftpoint-agent"
SERVER_ONLY_MODULES = ("pysyncobj", "lmdb", "prometheus_client", "structlog")


def build_sdist(project: Path, out: Path) -> Path:
    """With the project's own build backend, from this environment (the dev extra has it)."""
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out),
                             str(project)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [sdist] = out.glob("*.tar.gz")
    return sdist


def dependency_closure(requirements: list[str], extras: set[str]) -> list[metadata.Distribution]:
    """The installed distributions `requirements` (with `extras`) need, transitively."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(Requirement(r), extras) for r in requirements]
    while pending:
        requirement, wanted = pending.pop()
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in wanted | {""}):
            continue
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name in found:
            continue
        found[name] = metadata.distribution(name)
        pending += [(Requirement(r), set(requirement.extras)) for r in found[name].requires or []]
    return list(found.values())


def link_only(distributions: list[metadata.Distribution], target: Path) -> None:
    """A folder holding (as symlinks) exactly these distributions' top-level files and metadata."""
    target.mkdir()
    for dist in distributions:
        tops = {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)


def site_packages(env_dir: Path) -> Path:
    [site] = (env_dir / "lib").glob("python3*/site-packages")
    return site


def show_only(env_dir: Path, distributions: list[metadata.Distribution], folder: Path) -> None:
    """The virtualenv sees, besides what is installed in it, these distributions and no others
    (linked into `folder`, which replaces what an earlier call showed it)."""
    link_only(distributions, folder)
    (site_packages(env_dir) / "linked_distributions.pth").write_text(f"{folder}\n")
