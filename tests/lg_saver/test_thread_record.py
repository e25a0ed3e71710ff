"""ThreadRecord: the pure rules of a LangGraph thread's stored form."""
from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.base")
from agent_client.langgraph.thread_record import ThreadRecord, version_key  # noqa: E402

CP, META = ("msgpack", b"cp"), ("msgpack", b"meta")


def _record() -> ThreadRecord:
    record = ThreadRecord("t")
    record.put("", "1", CP, META, None, {"a": 1}, {"a": (1, "file:///a1")})
    record.put("", "2", CP, META, "1", {"a": 2}, {"a": (2, "file:///a2")})
    record.put_writes("", "2", "task", "~0", [(0, "a", ("json", b"3"))])
    return record


def test_a_change_to_a_copy_leaves_the_original_as_it_was() -> None:
    original = _record()
    before = original.to_json()
    copy = original.copy_as("t")
    copy.put("", "3", CP, META, "2", {"a": 3}, {"a": (3, "file:///a3")})
    copy.put_writes("", "2", "task", "~0", [(-1, "__error__", ("json", b"x"))])
    copy.keep_latest()
    assert original.to_json() == before
    assert copy.latest_id("") == "3" and original.latest_id("") == "2"


def test_keep_latest_drops_older_checkpoints_their_writes_and_unused_values() -> None:
    record = _record()
    record.put_writes("", "1", "task", "~0", [(0, "a", ("json", b"1"))])
    assert record.keep_latest()
    assert list(record.checkpoints[""]) == ["2"]
    assert list(record.writes[""]) == ["2"]
    assert record.values == {"": {"a": {version_key(2): "file:///a2"}}}
    assert not record.keep_latest()  # nothing more to drop


def test_writes_are_stored_once_per_task_and_index_and_special_ones_replaced() -> None:
    record = _record()
    assert not record.put_writes("", "2", "task", "~0", [(0, "a", ("json", b"other"))])
    assert record.put_writes("", "2", "task", "~0", [(-1, "__error__", ("json", b"e1"))])
    assert record.put_writes("", "2", "task", "~0", [(-1, "__error__", ("json", b"e2"))])
    assert [w[1:] for w in record.get("", "2").writes] == [("__error__", ("json", b"e2")), ("a", ("json", b"3"))]


def test_versions_of_different_types_do_not_collide() -> None:
    assert version_key(1) != version_key("1")
