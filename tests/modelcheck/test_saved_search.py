"""A search that saves itself as each depth starts (saved_search.py), stopped at any point
and run again, ends where one uninterrupted search ends: the same states, levels,
violations and counterexamples; in another process too, where Python salts string
hashes anew and hashes None by an address that moves; and a save of another search
is refused with its reason."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from coordinator.core.model import Mode
from tests.modelcheck.explore import Report, check
from tests.modelcheck.planted import PLANTED
from tests.modelcheck.saved_search import SaveRefused
from tests.modelcheck.world import Bounds, World

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "model_check.py"
BUG = PLANTED["rollbacks undo no send"]  # worlds it stops are met again at later depths
SEARCH: dict[str, Any] = {"symmetric": True, "subsume": True}
DEPTH = 12


class _Stopped(Exception):
    """A search's process ended partway through a depth."""


def _stopping_at(world_number: int) -> Any:
    seen = [0]

    def visit(_: World) -> None:
        seen[0] += 1
        if seen[0] == world_number:
            raise _Stopped

    return visit


def _outcome(report: Report) -> tuple[Any, ...]:
    return report.states, report.transitions, report.per_level, report.complete, report.violations


def test_a_search_stopped_partway_through_a_depth_resumes_to_what_one_run_finds(tmp_path: Path) -> None:
    bounds = Bounds(Mode.CIC_BCS, **BUG.bounds)
    with mock.patch.object(BUG.module, BUG.attribute, BUG.replacement):
        whole = check(bounds, DEPTH, **SEARCH)
        assert whole.violations and len(whole.per_level) > 6, f"the bug is not found past depth 6: {whole}"
        stop_in = sum(whole.per_level[:6]) + whole.per_level[6] // 2  # halfway through depth 6
        with pytest.raises(_Stopped):
            check(bounds, DEPTH, **SEARCH, save_dir=tmp_path, visit=_stopping_at(stop_in))
        resumed = check(bounds, DEPTH, **SEARCH, save_dir=tmp_path)
    assert _outcome(resumed) == _outcome(whole), f"resumed: {_outcome(resumed)}\nwhole: {_outcome(whole)}"


def test_a_save_of_other_bounds_is_refused_with_the_difference(tmp_path: Path) -> None:
    bounds = Bounds(Mode.CIC_BCS, agents=2, max_index=1, leader_changes=0, losses=0)
    check(bounds, 3, **SEARCH, save_dir=tmp_path)
    with pytest.raises(SaveRefused, match=r"another bounds .*losses=0.*losses=1"):
        check(Bounds(Mode.CIC_BCS, agents=2, max_index=1, leader_changes=0, losses=1), 3, **SEARCH,
              save_dir=tmp_path)
    with pytest.raises(SaveRefused, match="another subsume"):
        check(bounds, 3, symmetric=True, save_dir=tmp_path)
    with pytest.raises(SaveRefused, match="is at depth 3, past this search.s bound of 2"):
        check(bounds, 2, **SEARCH, save_dir=tmp_path)
    with pytest.raises(SaveRefused, match="needs the symmetric key"):
        check(bounds, 3, subsume=True, save_dir=tmp_path / "plain")


def _benchmark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARK), "--agents", "2", "--modes", "cic_bcs", *args],
                          capture_output=True, text=True, timeout=300, check=False)


def _row(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The mode's row but for its seconds."""
    assert run.returncode == 0, f"exit {run.returncode}: {run.stdout}{run.stderr}"
    cells = next(line for line in run.stdout.splitlines() if line.startswith("cic_bcs")).split()
    return cells[:5] + cells[6:]


@pytest.mark.slow
def test_the_benchmark_resumes_a_search_in_a_new_process(tmp_path: Path) -> None:
    first = _benchmark("--depth", "5", "--save-dir", str(tmp_path))
    resumed, whole = _benchmark("--depth", "8", "--save-dir", str(tmp_path)), _benchmark("--depth", "8")
    assert _row(first)[1] != _row(whole)[1], "the first run already went as deep as the whole one"
    assert _row(resumed) == _row(whole), f"resumed:\n{resumed.stdout}\nwhole:\n{whole.stdout}"
    other = _benchmark("--depth", "8", "--losses", "0", "--save-dir", str(tmp_path))
    assert other.returncode == 2 and "another bounds" in other.stderr and "Traceback" not in other.stderr, (
        f"exit {other.returncode}: {other.stderr}")
