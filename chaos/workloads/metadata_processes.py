"""The metadata workload's processes: how a request is sent, and sent again.

A process is a Jepsen process: one recording client with at most one open operation.
A write whose outcome stayed unknown (`info`) is kept and re-sent with the same
request id, recorded with `retry_of`, until it gets an answer, MAX_TRIES sends were
made, or the run ends; a completed one may be re-sent on purpose, and must then be
answered as the first time. Every send counts against the run's operation budget.
While `hurry()` says so (a fault is in force), a process sends through a client with
a short deadline, so that many operations end `info` and the checker's handling of
unknown outcomes is exercised.
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from chaos.client import Outcome, RecordingClient, Request
from chaos.history import INFO
from chaos.workloads.metadata_ops import WRITES

MAX_TRIES = 4  # sends of one request that ended `info`, the first included
RECENT = 30  # completed writes a process remembers for deliberate re-sends


class RunBudget:
    """When the run is over: stopped, past its deadline, or out of operations."""

    def __init__(self, max_ops: int) -> None:
        self.max_ops = max_ops
        self.deadline = float("inf")
        self.ops = 0
        self._stop = threading.Event()
        self._held = False

    def start(self, duration_s: float) -> None:
        self.deadline = time.monotonic() + duration_s

    def hold(self) -> None:
        """Keep running past the deadline until release(): the load must outlast the faults'
        last heal, which on a loaded machine can come later than planned (an agent restart
        that takes seconds). Still bounded by the operation budget and by stop()."""
        self._held = True

    def release(self, tail_s: float) -> None:
        """Run `tail_s` more (or to the deadline, if later), then end."""
        self.deadline = max(self.deadline, time.monotonic() + tail_s)
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    def spend(self) -> None:
        self.ops += 1

    def running(self) -> bool:
        in_time = self._held or time.monotonic() < self.deadline
        return not self._stop.is_set() and in_time and self.ops < self.max_ops

    def pause(self, seconds: float) -> bool:
        """Sleep unless stopped; False once the run is over."""
        self._stop.wait(seconds)
        return self.running()

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Sent:
    """A request a process sent: re-sent while its outcome is unknown, or deliberately."""

    request: Request
    invoke_index: int
    on_done: Callable[[Outcome], None] | None
    tries: int = 1


@dataclass
class ClientProcess:
    client: RecordingClient
    rng: random.Random
    budget: RunBudget
    done: deque[Sent] = field(default_factory=lambda: deque(maxlen=RECENT))
    unresolved: deque[Sent] = field(default_factory=deque)
    thread: threading.Thread | None = None
    hurried: RecordingClient | None = None  # the same process, with a short deadline
    hurry: Callable[[], bool] = lambda: False

    @property
    def name(self) -> str:
        return self.client.process

    def _client(self, request: Request) -> RecordingClient:
        """Streams (watches) keep the long deadline: their window is longer than a hurried one."""
        if self.hurried is not None and request.window is None and self.hurry():
            return self.hurried
        return self.client

    def close(self) -> None:
        for client in (self.client, self.hurried):
            if client is not None:
                client.close()

    def send(self, request: Request, on_done: Callable[[Outcome], None] | None = None, *,
             resolve: bool = True) -> Outcome:
        """Send a request; `on_done(outcome)` once it is answered. `resolve`: re-send it
        later if its outcome stays unknown."""
        self.budget.spend()
        outcome = self._client(request).send(request)
        self._settled(Sent(request, outcome.invoke.index, on_done), outcome, resolve)
        return outcome

    def resend(self, sent: Sent, *, final: bool = False) -> Outcome:
        """The same request again (same request id), recorded as a retry of the first send."""
        self.budget.spend()
        outcome = self._client(sent.request).send(sent.request, retry_of=sent.invoke_index)
        sent.tries += 1
        self._settled(sent, outcome, resolve=not final and sent.tries < MAX_TRIES)
        return outcome

    def _settled(self, sent: Sent, outcome: Outcome, resolve: bool) -> None:
        if sent.request.f in WRITES:
            if outcome.type == INFO:
                if resolve:
                    self.unresolved.append(sent)
            else:
                self.done.append(sent)
        if sent.on_done is not None and outcome.type != INFO:
            sent.on_done(outcome)

    def send_until(self, request: Request, on_done: Callable[[Outcome], None] | None, *, tries: int,
                   again: Callable[[Outcome], bool]) -> tuple[Outcome, Sent]:
        """Send, then re-send at once (never later) while `again(outcome)`, at most
        `tries` sends in all: the last outcome, and the request as sent."""
        outcome = self.send(request, on_done, resolve=False)
        sent = Sent(request, outcome.invoke.index, on_done)
        while again(outcome) and sent.tries < tries:
            outcome = self.resend(sent, final=True)
        return outcome, sent

    def until_ok(self, request: Request, attempts: int, on_done: Callable[[Outcome], None] | None = None) -> None:
        """Send and re-send until it succeeds (setting up, while the cluster may still be
        electing); a RuntimeError after `attempts` sends."""
        outcome, _ = self.send_until(request, on_done, tries=attempts, again=lambda o: not o.ok)
        if not outcome.ok:
            raise RuntimeError(f"setup: {request.f} {request.value} did not succeed: {outcome.error}")

    def retry_something(self, group: str) -> None:
        """Deliberately re-send a completed request of this group: it must be answered as the first time."""
        candidates = [s for s in self.done if s.request.group == group]
        if candidates:
            sent = self.rng.choice(candidates)
            self.budget.spend()
            self._client(sent.request).send(sent.request, retry_of=sent.invoke_index)

    def resolve_unknown(self) -> None:
        """One more answer for each request still unknown (the process's thread is done)."""
        while self.unresolved:
            self.resend(self.unresolved.popleft(), final=True)


__all__ = ["MAX_TRIES", "ClientProcess", "RunBudget", "Sent"]
