"""A search whose depths are expanded by several processes (workers.py) reports what
one process reports: the same states, transitions, levels, violations and shortest
counterexamples, with a depth's worlds in memory or on disk, with a planted bug, and
stopped at the first violation; it saves as each depth starts, for one process to
resume; and a worker that raises fails the search with the worker's traceback."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from coordinator.core.model import Mode
from tests.modelcheck.explore import Expander, Report, check
from tests.modelcheck.planted import PLANTED
from tests.modelcheck.workers import WorkerFailed
from tests.modelcheck.world import Bounds

SEARCH: dict[str, Any] = {"symmetric": True, "subsume": True}
BUG = PLANTED["rollbacks undo no send"]


def _outcome(report: Report) -> tuple[Any, ...]:
    return (report.states, report.transitions, report.per_level, report.complete, report.violations,
            report.recoveries, report.restores, report.subsumed)


# (mode, bounds, depth, in_memory, planted bug or None, stop_at_first): in_memory 20
# puts most of each depth on disk, in several blocks per worker.
CASES = {
    "in memory": (Mode.CIC_HMNR, {"agents": 2, "max_index": 1, "epochs": 1}, 7, 1_000_000, None, False),
    "on disk": (Mode.COORDINATED, {"agents": 2, "max_index": 1, "epochs": 1, "restores": 1}, 9, 20, None, False),
    "bug": (Mode.CIC_BCS, BUG.bounds, 12, 20, BUG, False),
    "bug, first only": (Mode.CIC_BCS, BUG.bounds, 12, 1_000_000, BUG, True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_workers_report_what_one_process_reports(case: str) -> None:
    mode, bounds_given, depth, in_memory, bug, first = CASES[case]
    bounds = Bounds(mode, **bounds_given)
    with mock.patch.object(bug.module, bug.attribute, bug.replacement) if bug else contextlib.nullcontext():
        alone = check(bounds, depth, **SEARCH, in_memory=in_memory, stop_at_first=first)
        shared = check(bounds, depth, **SEARCH, in_memory=in_memory, stop_at_first=first, workers=2)
    if bug is not None:
        assert set(bug.breaks) <= set(alone.violations), f"{case}: the bug went unseen: {list(alone.violations)}"
    assert first or alone.states > 1000, f"{case}: {alone.states} states: the case explores almost nothing"
    assert _outcome(shared) == _outcome(alone), (
        f"{case}: with workers {_outcome(shared)[:4]}, alone {_outcome(alone)[:4]}")


@pytest.mark.slow
def test_a_search_saved_by_workers_resumes_in_one_process(tmp_path: Path) -> None:
    """Workers save as each depth starts; a deeper search in one process resumes the
    save to what one process finds from the start."""
    bounds = Bounds(Mode.CIC_BCS, agents=2, max_index=1, epochs=1)
    whole = check(bounds, 8, **SEARCH)
    check(bounds, 5, **SEARCH, save_dir=tmp_path, workers=2)
    resumed = check(bounds, 8, **SEARCH, save_dir=tmp_path)
    assert _outcome(resumed) == _outcome(whole), (_outcome(resumed)[:4], _outcome(whole)[:4])


def test_a_worker_that_raises_fails_the_search_with_its_traceback() -> None:
    search = os.getpid()
    expand = Expander.expand

    def failing(self: Expander, *args: Any, **kwargs: Any) -> Any:
        if os.getpid() != search:
            raise RuntimeError("a worker's expansion broke")
        return expand(self, *args, **kwargs)

    with mock.patch.object(Expander, "expand", failing), pytest.raises(WorkerFailed, match="expansion broke"):
        check(Bounds(Mode.CIC_BCS, agents=2, max_index=1, epochs=1), 8, **SEARCH, workers=2)


def test_visit_is_refused_with_workers() -> None:
    with pytest.raises(ValueError, match="not with workers"):
        check(Bounds(Mode.CIC_BCS, agents=2), 3, **SEARCH, workers=2, visit=lambda world: None)
