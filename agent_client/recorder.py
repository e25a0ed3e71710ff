"""Recorded calls: a model or tool callable whose responses a later run can replay.

`client.recorded(name, fn)` returns a callable that behaves like `fn`. Each call
gets the next position of the current run (the calls since the last restore); the
client's `replay` horizon (replay.py) says whether that position is replayed from the
history of the restored checkpoint or made live and recorded (call_log.py). The
recorder follows the client's restores by itself: the protocol makes a new RunStart
at each, and the first recorded call or checkpoint after it starts a new run.

Calls are made one at a time, in an order the agent's own logic decides: a second
live call while one is running is refused, as its position would depend on timing.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from agent_client.call_log import CallLog
from agent_client.replay import (Coordinate, History, Horizon, RunStart, check_replayed, encode_response,
                                 replayed_calls, request_digest)

log = logging.getLogger("agent_client")


@dataclass(frozen=True)
class Step:
    """One call as the recorder decided it: replayed (with its response) or to be made live."""

    name: str
    digest: str
    start: RunStart
    replayed: bool
    response: Any = None


class CallRecorder:
    """The recorded calls of one client (thread-safe)."""

    def __init__(self, calls: CallLog, horizon: Horizon, run_start: Callable[[], RunStart]) -> None:
        self._log, self._horizon, self._run_start = calls, horizon, run_start
        self._lock = threading.Lock()
        self._start: RunStart | None = None
        self._history = History()
        self.replaying = 0  # how many of this run's first calls are replayed
        self.position = 0  # calls made in this run
        self._run: int | None = None  # this run's id once it wrote anything, and the position it forked at
        self._forked_at = 0
        self._live_call = False

    def _follow(self) -> RunStart:
        """Start a new run if the client restored since the last call."""
        start = self._run_start()
        if start is not self._start:
            self._start, self._history = start, self._log.history(start.coordinate)
            self.replaying, self.position, self._run, self._live_call = (
                replayed_calls(self._horizon, self._history), 0, None, False)
            if self._horizon != "none" and start.coordinate is not None and not self._log.holds(start.coordinate):
                log.warning("%s names recorded calls this journal does not hold (another machine's, or a deleted "
                            "journal): nothing to replay, every call is live", start.describe())
            elif self._horizon != "none":
                log.info("replaying %d recorded call(s) after %s (replay=%r), then calling live", self.replaying,
                         start.describe(), self._horizon)
        return start

    def _write_position(self) -> tuple[int, int]:
        """(this run, the position in it), forking the run first if it has written nothing."""
        if self._run is None:
            self._run, self._forked_at = self._log.fork(self._history.at(self.position)), self.position
        return self._run, self.position - self._forked_at

    def begin(self, name: str, request: Any) -> Step:
        """The call's response if it is replayed (ReplayDiverged if it asks something else
        than the recorded call), else a step to make live and then finish()."""
        digest = request_digest(name, request)
        with self._lock:
            start = self._follow()
            if self.position < self.replaying:
                recorded = self._history.calls[self.position]
                check_replayed(self.position, name, digest, recorded, start.describe())
                if self._run is not None:  # a run that forked records its replayed calls too
                    self._log.add_call(*self._write_position(), name, digest, recorded.response)
                self.position += 1
                return Step(name, digest, start, True, json.loads(recorded.response))
            if self._live_call:
                raise RuntimeError(f"recorded call {name!r} started while another one is running: recorded calls "
                                   f"are made one at a time, so that a replay knows which is which")
            self._live_call = True
            return Step(name, digest, start, False)

    def finish(self, step: Step, response: Any) -> Any:
        """Record a live call's response; returns it as a replay would (decoded JSON)."""
        with self._lock:
            self._live_call = False
            encoded = encode_response(step.name, response)
            if self._run_start() is step.start:  # else a rollback undid the run while the call ran
                self._follow()
                self._log.add_call(*self._write_position(), step.name, step.digest, encoded)
                self.position += 1
        return json.loads(encoded)

    def abandon(self, step: Step) -> None:
        """The live call raised: nothing is recorded and its position stays free."""
        with self._lock:
            self._live_call = False

    def note_effect(self, key: str) -> None:
        """An external effect starts here: a replay with horizon "effects" repeats every
        call before it."""
        with self._lock:
            self._follow()
            self._log.add_effect(*self._write_position(), key)

    def coordinate(self) -> list[int] | None:
        """Where the run stands, for a checkpoint taken now to name (JSON)."""
        with self._lock:
            self._follow()
            at: Coordinate | None = ((self._run, self.position - self._forked_at) if self._run is not None
                                     else self._history.at(self.position))
            return None if at is None else list(at)

    def close(self) -> None:
        self._log.close()


def recorded_callable(recorder: CallRecorder, name: str, fn: Callable[..., Any],
                      request: Callable[..., Any] | None) -> Callable[..., Any]:
    """`fn` with its calls recorded and replayed; a coroutine function stays one (the
    journal is written from a worker thread)."""

    def asked(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return request(*args, **kwargs) if request is not None else {"args": list(args), "kwargs": kwargs}

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            step = await asyncio.to_thread(recorder.begin, name, asked(args, kwargs))
            if step.replayed:
                return step.response
            try:
                response = await fn(*args, **kwargs)
            except BaseException:
                recorder.abandon(step)
                raise
            return await asyncio.to_thread(recorder.finish, step, response)
        return call_async

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        step = recorder.begin(name, asked(args, kwargs))
        if step.replayed:
            return step.response
        try:
            response = fn(*args, **kwargs)
        except BaseException:
            recorder.abandon(step)
            raise
        return recorder.finish(step, response)
    return call
