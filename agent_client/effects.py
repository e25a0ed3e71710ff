"""The effects the sans-I/O protocol (protocol.py) asks for, and the loops that run it.

A protocol operation is a generator: it yields an effect, is resumed with the
effect's result, or has the effect's exception thrown in at the yield. The protocol
decides; the shells perform. `drive()` performs each effect with a blocking call
(agent.py), `drive_async()` awaits it (aio.py); both resume the operation the same
way, through `step()`, so the two clients cannot differ in how an answer or an
error reaches the protocol.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, ContextManager, Generator, TypeVar

from coordinator import tracing
from coordinator.api.v1 import coordinator_pb2 as pb

T = TypeVar("T")


@dataclass(slots=True)
class Rpc:
    """A unary call to the coordinator (retried by the connection under its deadline)."""

    service: str
    method: str
    request: Any


@dataclass(slots=True)
class Watch:
    """The orders WatchOrders streams within `window` seconds."""

    request: pb.WatchOrdersRequest
    window: float


@dataclass(slots=True)
class Blocking:
    """A local call that may block on disk (blob store, delivery log). `quick` ones
    (one write() on an open file) need no thread in an event loop."""

    fn: Callable[[], Any]
    quick: bool = False
    span: str = ""  # the trace span's name for this call ("": none)

    def traced(self) -> ContextManager[None]:
        return tracing.span(self.span) if self.span else contextlib.nullcontext()


@dataclass(slots=True)
class Callback:
    """User code (snapshot, on_rollback, on_redeliver, test hooks); in the asyncio
    client it may be a coroutine function."""

    fn: Callable[[], Any]


Effect = Rpc | Watch | Blocking | Callback
ProtocolOperation = Generator[Effect, Any, T]  # yields effects, returns a T


def operation_span(name: str, group: str, agent_id: str) -> ContextManager[None]:
    """The trace span of one protocol operation a shell runs ("": none)."""
    if not name:
        return contextlib.nullcontext()
    return tracing.span(name, **{"raftpoint.group": group, "raftpoint.agent": agent_id})


def step(op: ProtocolOperation[T], value: Any = None, error: BaseException | None = None) -> tuple[bool, Any]:
    """Resume an operation with an effect's result (or its exception): (True, the
    operation's result) when it finished, else (False, the next effect)."""
    try:
        return False, (op.throw(error) if error is not None else op.send(value))
    except StopIteration as stop:
        return True, stop.value


def perform_blocking(conn: Any, effect: Effect) -> Any:
    """An effect performed with blocking calls on a Connection: what every blocking
    shell (AgentClient, the LangGraph saver's thread store) does with one."""
    if isinstance(effect, Rpc):
        return conn.call(effect.service, effect.method, effect.request)
    if isinstance(effect, Watch):
        return conn.collect("AgentService", "WatchOrders", effect.request, window=effect.window)
    if isinstance(effect, Blocking):
        with effect.traced():
            return effect.fn()
    if isinstance(effect, Callback):
        return effect.fn()
    raise TypeError(f"unknown effect {effect!r}")


def drive(op: ProtocolOperation[T], perform: Callable[[Effect], Any]) -> T:
    """Run an operation, performing each effect with a blocking call."""
    done, out = step(op)
    while not done:
        try:
            value, error = perform(out), None
        except Exception as exc:  # thrown back into the operation at its yield
            value, error = None, exc
        done, out = step(op, value, error)
    return out


async def drive_async(op: ProtocolOperation[T], perform: Callable[[Effect], Awaitable[Any]]) -> T:
    """drive(), awaiting each effect."""
    done, out = step(op)
    while not done:
        try:
            value, error = await perform(out), None
        except Exception as exc:  # thrown back into the operation at its yield
            value, error = None, exc
        done, out = step(op, value, error)
    return out
