"""Group commit: the changes to one record that arrive while a commit of it is in flight
go out together in the next commit, and each caller returns only once a commit holding
its change is acknowledged.

A LangGraph step calls put_writes once per task and put once, and LangGraph (durability
"async", its default) makes these calls from worker threads without waiting for one
another: one commit for what queued up meanwhile costs one blob write and one Raft
commit instead of one per call, and no call returns earlier than it would alone.

Rules, for one record:
- a change edits the newest version (committed or not) and never the version it read
  earlier, so the changes apply in the order they took their turn;
- a change returns when a commit at least as new as it is acknowledged; a change that
  edits nothing still waits for the changes pending before it, which it may repeat (a
  retried put_writes), and returns at once when none is pending (a failure before it
  is not its own);
- a commit that fails fails every change not yet acknowledged, and the next change
  starts again from the last acknowledged version: a change built on a failed one is
  never committed without it.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """The pending changes of one record; safe to share between threads."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._newest: T | None = None  # the newest version while a change is unacknowledged
        self._changes = 0  # changes made
        self._acknowledged = 0  # changes some commit acknowledged
        self._committing = False
        self._failed_upto, self._failure = 0, BaseException()

    @property
    def unacknowledged(self) -> int:
        """Changes made that no commit acknowledged or failed yet."""
        with self._turn:
            return self._changes - max(self._acknowledged, self._failed_upto)

    def change(self, committed: Callable[[], T], edit: Callable[[T], T | None], commit: Callable[[T], None]) -> None:
        """Apply `edit` to the newest version (`committed()` when nothing is pending; the
        edit must return a new value, not change its argument; None: no change) and
        return once `commit` acknowledged it. An exception of `committed` or `edit`
        changes nothing; one of `commit` is raised to every change it covered."""
        with self._turn:
            newest = self._newest
            pending = newest is not None
            edited = edit(newest if newest is not None else committed())
            if edited is not None:
                self._newest = edited
                self._changes += 1
            elif not pending:  # nothing to change and nothing pending: what it wants is stored
                return
            self._await(self._changes, commit)

    def _await(self, change: int, commit: Callable[[T], None]) -> None:
        """Called with the turn held: commit, or wait for the commit in flight, until
        change number `change` is acknowledged."""
        while self._acknowledged < change:
            if self._failed_upto >= change:
                raise self._failure
            if self._committing:
                self._turn.wait()
                continue
            version, upto = self._newest, self._changes
            assert version is not None
            self._committing = True
            self._turn.release()
            try:
                commit(version)
            except BaseException as exc:
                self._turn.acquire()
                self._failed_upto, self._failure, self._newest = self._changes, exc, None
                raise
            else:
                self._turn.acquire()
                self._acknowledged = upto
                if upto == self._changes:
                    self._newest = None  # what committed() returns from now on
            finally:
                self._committing = False
                self._turn.notify_all()
