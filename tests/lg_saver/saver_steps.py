"""Small helpers the saver tests share: a checkpoint on top of another, with channel values;
waiting for a condition."""
from __future__ import annotations

import time
from typing import Any, Callable

from langgraph.checkpoint.base import Checkpoint, create_checkpoint, empty_checkpoint


def thread(thread_id: str, ns: str = "") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def step(base: Checkpoint | None, values: dict[str, Any], step_no: int) -> tuple[Checkpoint, dict[str, int]]:
    """A checkpoint after `base` whose channels in `values` changed (their versions rise)."""
    checkpoint = create_checkpoint(base or empty_checkpoint(), None, step_no)
    versions = dict(checkpoint["channel_versions"])
    new_versions = {ch: int(versions.get(ch, 0)) + 1 for ch in values}
    checkpoint["channel_versions"] = {**versions, **new_versions}
    checkpoint["channel_values"] = {**checkpoint["channel_values"], **values}
    return checkpoint, new_versions


def wait_until(condition: Callable[[], bool], saw: Callable[[], str], timeout: float = 30) -> None:
    """Poll `condition` until it holds; past `timeout`, fail with what `saw` says now."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, saw()
        time.sleep(0.005)
