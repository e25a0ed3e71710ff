"""The history records what clients saw, pairs completions with invocations and survives a reload."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.history import FAIL, INFO, INVOKE, OK, History, calls, load


def test_pairs_completions_with_their_invocations_and_streams_to_disk(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with History(path) as h:
        h.invoke("w1", "commit", {"index": 1}, node="n0")
        h.invoke("w2", "commit", {"index": 2}, node="n1")
        h.nemesis("kill", {"node": 0})
        h.complete("w2", FAIL, error="FAILED_PRECONDITION")
        h.complete("w1", OK, {"stable_epoch": 0}, node="n0")
        h.invoke("w2", "commit", {"index": 3})  # never completes: unknown outcome
    ops = load(path)
    assert [o.type for o in ops] == [INVOKE, INVOKE, INFO, FAIL, OK, INVOKE]
    assert [o.index for o in ops] == list(range(6))
    assert all(a.time <= b.time for a, b in zip(ops, ops[1:]))
    paired = list(calls(ops))
    assert [(c.invoke.value, c.type) for c in paired] == [({"index": 1}, OK), ({"index": 2}, FAIL), ({"index": 3}, INFO)]
    assert paired[0].value == {"stable_epoch": 0}
    assert paired[2].end == float("inf")


def test_a_process_has_one_open_operation() -> None:
    h = History()
    h.invoke("w1", "commit")
    with pytest.raises(ValueError):
        h.invoke("w1", "commit")
    h.complete("w1", OK)
    with pytest.raises(ValueError):
        h.complete("w1", OK)
    h.invoke("w1", "x")
    with pytest.raises(ValueError):
        h.complete("w1", "done")  # not a completion type
