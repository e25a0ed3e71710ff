"""The operation history of a chaos run: what every client and the nemesis did, and when.

Modelled on Jepsen's histories so the checker reasons about outcomes a client can
actually observe. Every client operation is recorded twice: an `invoke` before the
request leaves, then exactly one completion:

- `ok`: acknowledged; the write must be visible from then on.
- `fail`: definitely not applied (a rejection the state machine answered with, or a
  request refused before it was proposed).
- `info`: outcome unknown (timeout, no leader answered); it may or may not have applied.

The nemesis (the fault injector) records `info` operations with process "nemesis":
`fault(kind, ...)` when it injects a fault and `heal(kind, ...)` when that fault
ends (a killed node restarted, a partition healed); the checker measures
availability after each fault kind and the time to serve again after the last heal.
Times are seconds on the monotonic clock since the history was opened, so an
operation A *precedes* B in real time exactly when A's completion time is below B's
invocation time. The history is also streamed to a JSON Lines file as it grows, so a
run that dies still leaves its evidence.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
COMPLETIONS = (OK, FAIL, INFO)
NEMESIS = "nemesis"
FAULT, HEAL = "fault", "heal"  # the "phase" of a nemesis op's value
CRASHED = "crashed"  # a note: a client process died of an exception (a harness bug, not a finding)
NemesisRecord = Callable[[str, Any], None]  # how a fault injector records a nemesis op: (f, value)


@dataclass(frozen=True)
class Op:
    index: int
    time: float
    process: str
    type: str
    f: str
    value: Any = None
    node: str | None = None
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, line: str) -> "Op":
        return cls(**json.loads(line))


@dataclass(frozen=True)
class Call:
    """An invocation paired with its completion (None while still open at the end)."""

    invoke: Op
    completion: Op | None

    @property
    def type(self) -> str:
        return self.completion.type if self.completion is not None else INFO

    @property
    def start(self) -> float:
        return self.invoke.time

    @property
    def end(self) -> float:
        """Completion time; an operation that never completed may take effect any time later."""
        return self.completion.time if self.completion is not None else float("inf")

    @property
    def value(self) -> Any:
        """The completion's value when it has one (e.g. the response), else the invocation's."""
        if self.completion is not None and self.completion.value is not None:
            return self.completion.value
        return self.invoke.value


@dataclass
class History:
    """Thread-safe, append-only; pass `path` to stream every op to a JSON Lines file."""

    path: Path | None = None
    ops: list[Op] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._open: dict[str, Op] = {}
        self._file = open(self.path, "a", encoding="utf-8") if self.path is not None else None

    def now(self) -> float:
        return time.monotonic() - self._t0

    def _append(self, process: str, type_: str, f: str, value: Any, node: str | None, error: str | None) -> Op:
        with self._lock:
            op = Op(len(self.ops), self.now(), process, type_, f, value, node, error)
            self.ops.append(op)
            if self._file is not None:
                self._file.write(op.to_json() + "\n")
                self._file.flush()
            return op

    def invoke(self, process: str, f: str, value: Any = None, node: str | None = None) -> Op:
        """A process has at most one operation open at a time, as in Jepsen."""
        with self._lock:
            if process in self._open:
                raise ValueError(f"process {process!r} already has {self._open[process].f!r} open")
        op = self._append(process, INVOKE, f, value, node, None)
        with self._lock:
            self._open[process] = op
        return op

    def complete(self, process: str, type_: str, value: Any = None, node: str | None = None,
                 error: str | None = None) -> Op:
        if type_ not in COMPLETIONS:
            raise ValueError(f"not a completion type: {type_!r}")
        with self._lock:
            invoked = self._open.pop(process, None)
        if invoked is None:
            raise ValueError(f"process {process!r} has no open operation to complete")
        return self._append(process, type_, invoked.f, value, node, error)

    def nemesis(self, f: str, value: Any = None) -> Op:
        """A fault injected or healed: an `info` op of the nemesis process."""
        return self._append(NEMESIS, INFO, f, value, None, None)

    def fault(self, kind: str, **details: Any) -> Op:
        return self.nemesis(kind, {"phase": FAULT, **details})

    def heal(self, kind: str, **details: Any) -> Op:
        return self.nemesis(kind, {"phase": HEAL, **details})

    def note(self, process: str, f: str, value: Any = None, node: str | None = None) -> Op:
        """An observation that is not a client operation (e.g. a node status sample)."""
        return self._append(process, INFO, f, value, node, None)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: Path) -> list[Op]:
    with open(path, encoding="utf-8") as f:
        return [Op.from_json(line) for line in f if line.strip()]


def calls(ops: Iterable[Op]) -> Iterator[Call]:
    """Pair every invocation with its process's next completion, in invocation order."""
    open_: dict[str, Op] = {}
    done: dict[int, Op] = {}
    order: list[Op] = []
    for op in ops:
        if op.type == INVOKE:
            open_[op.process] = op
            order.append(op)
        elif op.process != NEMESIS and op.process in open_:
            done[open_.pop(op.process).index] = op
    for invoked in order:
        yield Call(invoked, done.get(invoked.index))
