"""A power loss of every node at once loses no acknowledged write, and the check can fail.

Three nodes on their own LoopDisks take concurrent CommitCheckpoint load; mid-load
every node is frozen, every file system shut down (unsynced data is gone), every
process killed, and the disks mounted again. After a restart every acknowledged
write must be listed, new writes must be accepted and the nodes must converge to
one digest. With the nodes' fsyncs disabled the same run must break.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.disk import unavailable_reason
from tests.chaos_suite.disk_scenarios import ACKED_BEFORE_CUT, POST_WRITES, run_in_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow,
              pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))]
ATTEMPTS_WITHOUT_FSYNC = 3


def broken(result: dict) -> list[str]:
    """What went wrong in one power-loss run (empty: nothing)."""
    problems = []
    if result["unreadable"]:
        problems.append(f"acknowledged writes unreadable after the restart: {result['unreadable']}")
    if result["missing"]:
        problems.append(f"{len(result['missing'])} of {result['acked']} acknowledged writes lost: "
                        f"{result['missing'][:5]}")
    if result["post_writes_ok"] != POST_WRITES:
        problems.append(f"only {result['post_writes_ok']} of {POST_WRITES} writes accepted after the restart")
    if result["converged_digest"] is None:
        problems.append(f"nodes did not converge: {result['statuses']}")
    return problems


def test_every_acknowledged_write_survives_a_power_loss_of_all_nodes(tmp_path: Path) -> None:
    result = run_in_namespace(tmp_path, "power-loss")
    assert result["acked"] >= ACKED_BEFORE_CUT
    assert broken(result) == []


def test_without_fsync_a_power_loss_loses_writes_or_diverges(tmp_path: Path) -> None:
    seen = []
    for attempt in range(ATTEMPTS_WITHOUT_FSYNC):
        result = run_in_namespace(tmp_path / f"attempt{attempt}", "power-loss", "--skip-fsync")
        seen.append(broken(result))
        if seen[-1]:
            return
    pytest.fail(f"{ATTEMPTS_WITHOUT_FSYNC} power losses without fsync broke nothing: {seen}")
