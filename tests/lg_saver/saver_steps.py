"""Small helpers the saver tests share: a checkpoint on top of another, with channel values."""
from __future__ import annotations

from typing import Any

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
