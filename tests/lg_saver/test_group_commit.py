"""GroupCommit: changes queued behind a commit in flight go out together, none is acknowledged early."""
from __future__ import annotations

import threading
from typing import Callable

import pytest

pytest.importorskip("langgraph.checkpoint.base")
from agent_client.langgraph.group_commit import GroupCommit  # noqa: E402
from tests.lg_saver.saver_steps import wait_until  # noqa: E402

WAIT_S = 30


class Record:
    """A record of tuples; commit() stores one version and, when gated, waits for the test first."""

    def __init__(self) -> None:
        self.stored: tuple[int, ...] = ()
        self.commits: list[tuple[int, ...]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.in_commit = threading.Event()
        self.fail_next: Exception | None = None
        self.returned: list[tuple[int, tuple[int, ...]]] = []  # (change, what was stored when its caller returned)
        self.lock = threading.Lock()

    def commit(self, version: tuple[int, ...]) -> None:
        self.in_commit.set()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        self.stored = version
        self.commits.append(version)

    def add(self, queue: GroupCommit[tuple[int, ...]], n: int) -> None:
        queue.change(lambda: self.stored, lambda v: (*v, n), self.commit)
        with self.lock:
            self.returned.append((n, self.stored))


def start(target: Callable[..., None], *args: object) -> threading.Thread:
    worker = threading.Thread(target=target, args=args, daemon=True)
    worker.start()
    return worker


def test_changes_queued_behind_a_commit_go_out_in_one_and_none_returns_before_it() -> None:
    record, queue = Record(), GroupCommit[tuple[int, ...]]()
    record.gate.clear()
    workers = [start(record.add, queue, 1)]
    assert record.in_commit.wait(WAIT_S), "the first change was never committed"
    workers += [start(record.add, queue, n) for n in (2, 3, 4)]
    wait_until(lambda: queue.unacknowledged == 4, lambda: f"{queue.unacknowledged} changes queued, not 4")
    assert record.returned == [], f"a change returned before any commit was acknowledged: {record.returned}"
    record.gate.set()
    for worker in workers:
        worker.join(WAIT_S)
    assert record.commits[0] == (1,) and len(record.commits) == 2, f"commits: {record.commits}"
    assert sorted(record.commits[1]) == [1, 2, 3, 4], f"commits: {record.commits}"
    for n, stored in record.returned:
        assert n in stored, f"change {n} returned when only {stored} was stored"
    assert queue.unacknowledged == 0


def test_a_failed_commit_fails_every_change_it_covered_and_the_next_starts_from_the_stored_version() -> None:
    record, queue = Record(), GroupCommit[tuple[int, ...]]()
    record.add(queue, 1)
    record.gate.clear()
    record.fail_next = RuntimeError("refused")
    errors: list[BaseException] = []

    def add_or_fail(n: int) -> None:
        try:
            record.add(queue, n)
        except RuntimeError as exc:
            errors.append(exc)

    workers = [start(add_or_fail, 2)]
    assert record.in_commit.wait(WAIT_S)
    workers.append(start(add_or_fail, 3))
    wait_until(lambda: queue.unacknowledged == 2, lambda: f"{queue.unacknowledged} changes queued, not 2")
    record.gate.set()
    for worker in workers:
        worker.join(WAIT_S)
    assert [str(e) for e in errors] == ["refused", "refused"], f"errors: {errors}, commits: {record.commits}"
    assert record.stored == (1,) and queue.unacknowledged == 0
    record.add(queue, 4)
    assert record.stored == (1, 4), f"after the failure the next change built on {record.stored}"


def test_a_change_that_edits_nothing_waits_for_the_changes_before_it() -> None:
    record, queue = Record(), GroupCommit[tuple[int, ...]]()
    record.gate.clear()
    first = start(record.add, queue, 1)
    assert record.in_commit.wait(WAIT_S)
    edited, done = threading.Event(), threading.Event()
    seen: list[tuple[int, ...]] = []

    def nothing(version: tuple[int, ...]) -> None:
        edited.set()
        return None

    def repeat() -> None:
        queue.change(lambda: record.stored, nothing, record.commit)
        seen.append(record.stored)
        done.set()

    start(repeat)
    assert edited.wait(WAIT_S), "the second change never took its turn"
    assert not done.wait(0.2), f"a change that edits nothing returned while the change before it was in flight: {seen}"
    record.gate.set()
    first.join(WAIT_S)
    assert done.wait(WAIT_S) and seen == [(1,)], f"it saw {seen}"


def test_a_change_that_edits_nothing_after_a_failed_commit_returns_without_its_error() -> None:
    """Nothing is pending once a commit failed: a change whose edit of the stored version
    is none has nothing to wait for, and the old failure is not its own."""
    record, queue = Record(), GroupCommit[tuple[int, ...]]()
    record.add(queue, 1)
    record.fail_next = RuntimeError("refused")
    with pytest.raises(RuntimeError, match="refused"):
        record.add(queue, 2)
    commits = len(record.commits)
    queue.change(lambda: record.stored, lambda version: None, record.commit)  # raised "refused" before
    assert record.stored == (1,) and len(record.commits) == commits, f"commits: {record.commits}"
