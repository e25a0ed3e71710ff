"""A search that saves itself as each depth starts and while it expands one
(saved_search.py), stopped at any point and run again, ends where one uninterrupted
search ends, having met again only what it met after its last save: the same states, levels,
violations and counterexamples; in another process too, where Python salts string
hashes anew and hashes None by an address that moves; and a save of another search
is refused with its reason."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from coordinator.core.model import Mode
from tests.modelcheck import saved_search
from tests.modelcheck.explore import IN_MEMORY, Report, check
from tests.modelcheck.planted import PLANTED
from tests.modelcheck.saved_search import SaveRefused
from tests.modelcheck.world import Bounds, World

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "model_check.py"
BUG = PLANTED["rollbacks undo no send"]  # worlds it stops are met again at later depths
SEARCH: dict[str, Any] = {"symmetric": True, "subsume": True}
DEPTH = 12


class _Stopped(Exception):
    """A search's process ended partway through a depth."""


def _counting(stop_at: int | None = None) -> tuple[list[int], Any]:
    """A count of the worlds a search visits, and a `visit` that counts them (and stops
    the search at the `stop_at`th)."""
    seen = [0]

    def visit(_: World) -> None:
        seen[0] += 1
        if seen[0] == stop_at:
            raise _Stopped

    return seen, visit


def _outcome(report: Report) -> tuple[Any, ...]:
    return report.states, report.transitions, report.per_level, report.complete, report.violations


# (mode, bounds, depth, planted bug or None, in_memory, save_every): the bug's worlds a
# violation stops are met again after the save; coordinated reads blobs an
# earlier depth learned (symmetry.learned); in_memory 5 puts a depth's worlds on disk
# before it is saved; save_every 0 saves before each world, partway through each depth.
CASES = {
    "bug": (Mode.CIC_BCS, BUG.bounds, DEPTH, BUG, IN_MEMORY, 3600.0),
    "on disk": (Mode.COORDINATED, {"agents": 2, "max_index": 1, "epochs": 1}, 8, None, 5, 3600.0),
    "on disk, partway": (Mode.COORDINATED, {"agents": 2, "max_index": 1, "epochs": 1}, 8, None, 5, 0.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_search_stopped_partway_through_a_depth_resumes_to_what_one_run_finds(case: str, tmp_path: Path) -> None:
    mode, bounds_given, depth, bug, in_memory, save_every = CASES[case]
    bounds = Bounds(mode, **bounds_given)
    patched = (mock.patch.object(bug.module, bug.attribute, bug.replacement) if bug is not None
               else contextlib.nullcontext())
    saved_after: list[int] = []  # the worlds the stopped search had met at each save
    save = saved_search.save

    def counted_save(*args: Any) -> None:
        save(*args)
        saved_after.append(seen[0])

    with patched:
        whole = check(bounds, depth, **SEARCH)
        assert len(whole.per_level) > 7 and (bug is None) != bool(whole.violations), f"not as expected: {whole}"
        stop_at = sum(whole.per_level[:7]) + whole.per_level[7] // 2  # halfway through expanding depth 6
        seen, visit = _counting(stop_at)
        with mock.patch.object(saved_search, "save", counted_save), pytest.raises(_Stopped):
            check(bounds, depth, **SEARCH, in_memory=in_memory, save_dir=tmp_path, visit=visit, save_every=save_every)
        last = (tmp_path / saved_search.CURRENT).read_text()
        met, visit = _counting()
        resumed = check(bounds, depth, **SEARCH, in_memory=in_memory, save_dir=tmp_path, visit=visit,
                        save_every=save_every)
    assert _outcome(resumed) == _outcome(whole), f"resumed: {_outcome(resumed)}\nwhole: {_outcome(whole)}"
    partway = last.count("-") == 2  # a save taken partway through a depth is named depth-D-E
    assert partway == (save_every == 0), f"the last save, {last}, is not what saving every {save_every} s takes"
    assert saved_after[-1] + met[0] == whole.states, (
        f"the stopped search met {saved_after[-1]} worlds before its last save ({last}) and the resumed one "
        f"{met[0]}, where one search meets {whole.states}: it did not resume where it was saved")


def test_a_save_of_another_search_or_damaged_is_refused_with_the_reason(tmp_path: Path) -> None:
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
    with mock.patch.object(saved_search, "_code_digest", lambda: "edited"), \
            pytest.raises(SaveRefused, match="another code"):
        check(bounds, 3, **SEARCH, save_dir=tmp_path)
    with saved_search.claimed(tmp_path), pytest.raises(SaveRefused, match="another search is saving"):
        check(bounds, 3, **SEARCH, save_dir=tmp_path)
    saved = tmp_path / (tmp_path / saved_search.CURRENT).read_text()
    worlds = (saved / "worlds").read_bytes()
    (saved / "worlds").write_bytes(worlds[:len(worlds) // 2])
    with pytest.raises(SaveRefused, match="cannot be read .*not the ones it saved"):
        check(bounds, 3, **SEARCH, save_dir=tmp_path)
    (saved / "identity.json").write_text("[]")
    with pytest.raises(SaveRefused, match="cannot be read"):
        check(bounds, 3, **SEARCH, save_dir=tmp_path)


def _benchmark(*args: str, seed: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"} | ({} if seed is None else
                                                                           {"PYTHONHASHSEED": seed})
    return subprocess.run([sys.executable, str(BENCHMARK), "--agents", "2", "--modes", "cic_bcs", *args],
                          capture_output=True, text=True, timeout=300, check=False, env=env)


def _row(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The mode's row but for its seconds."""
    assert run.returncode == 0, f"exit {run.returncode}: {run.stdout}{run.stderr}"
    cells = next(line for line in run.stdout.splitlines() if line.startswith("cic_bcs")).split()
    return cells[:5] + cells[6:]


@pytest.mark.slow
def test_the_benchmark_resumes_a_search_in_a_new_process(tmp_path: Path) -> None:
    first = _benchmark("--depth", "5", "--save-dir", str(tmp_path))
    resumed = _benchmark("--depth", "8", "--progress", "--save-dir", str(tmp_path))
    whole = _benchmark("--depth", "8")
    assert _row(first)[1] != _row(whole)[1], "the first run already went as deep as the whole one"
    assert _row(resumed) == _row(whole), f"resumed:\n{resumed.stdout}\nwhole:\n{whole.stdout}"
    assert "depth 3 done" not in resumed.stdout, f"it began again instead of at depth 5:\n{resumed.stdout}"
    for other, reason in ((_benchmark("--depth", "8", "--losses", "0", "--save-dir", str(tmp_path)), "another bounds"),
                          (_benchmark("--depth", "8", "--save-dir", str(tmp_path), seed="1"), "another hashing")):
        assert other.returncode == 2 and reason in other.stderr and "Traceback" not in other.stderr, (
            f"exit {other.returncode}: {other.stderr}")


@pytest.mark.slow
def test_progress_is_reported_as_each_depth_starts_partway_through_it_and_at_once_on_resuming_partway(
        tmp_path: Path) -> None:
    bounds = Bounds(Mode.COORDINATED, agents=2, max_index=1, epochs=1)
    calls: list[tuple[int, int]] = []  # (depth of the last world expanded, worlds of the depth expanded)

    def progress(report: Report, expanded: int) -> None:
        calls.append((report.depth_reached, expanded))

    whole = check(bounds, 8, **SEARCH, progress=progress, progress_every=0.0)
    # Every 0 s: as each depth after the first starts, then before each of its worlds but the first.
    expected: list[tuple[int, int]] = []
    for at, size in enumerate(whole.per_level):
        expected += ([(at - 1, 0)] if at else []) + [(at, done) for done in range(1, size)]
    assert calls == expected, (f"progress reported {calls[:12]}..., where each depth's start and world "
                               f"is {expected[:12]}...")

    stop_at = sum(whole.per_level[:7]) + whole.per_level[7] // 2  # halfway through expanding depth 6
    _, visit = _counting(stop_at)
    with pytest.raises(_Stopped):
        check(bounds, 8, **SEARCH, save_dir=tmp_path, visit=visit, save_every=0.0)
    saved_at = (tmp_path / saved_search.CURRENT).read_text()  # depth-D-E: E worlds of depth D expanded
    calls.clear()
    check(bounds, 8, **SEARCH, save_dir=tmp_path, progress=progress, progress_every=3600.0)
    depth, expanded = (int(n) for n in saved_at.split("-")[1:])
    assert calls[0] == (depth, expanded), f"resumed from {saved_at}, it first reported {calls[:3]}"
    assert calls[1:] == [(at - 1, 0) for at in range(depth + 1, len(whole.per_level))], (
        f"after resuming it reported {calls[1:]}, where only the starts of the depths left are due within an hour")
