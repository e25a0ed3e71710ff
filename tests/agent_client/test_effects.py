"""The loops that run a protocol operation: the blocking and the asyncio one resume it
the same way, with each effect's result or with its exception at the yield."""
from __future__ import annotations

from typing import Any

import pytest

from agent_client.effects import Blocking, Callback, Effect, ProtocolOperation, Rpc, drive, drive_async


class Refused(Exception):
    pass


def operation(trace: list[str]) -> ProtocolOperation[int]:
    """Adds what two effects return; the refused RPC between them counts as 100."""
    first = yield Blocking(lambda: 1)
    try:
        yield Rpc("AgentService", "Refuse", None)
        trace.append("not refused")
    except Refused as exc:
        trace.append(f"refused: {exc}")
        first += 100
    second = yield Callback(lambda: 2)
    return first + second


def perform(effect: Effect) -> Any:
    if isinstance(effect, Rpc):
        raise Refused(effect.method)
    assert isinstance(effect, (Blocking, Callback))
    return effect.fn()


async def perform_async(effect: Effect) -> Any:
    return perform(effect)


async def test_both_loops_resume_with_results_and_throw_errors_in_at_the_yield() -> None:
    blocking: list[str] = []
    awaited: list[str] = []
    assert drive(operation(blocking), perform) == 103
    assert await drive_async(operation(awaited), perform_async) == 103
    assert blocking == awaited == ["refused: Refuse"]


async def test_an_error_the_operation_does_not_handle_reaches_the_caller() -> None:
    def unguarded() -> ProtocolOperation[None]:
        yield Rpc("AgentService", "Refuse", None)

    with pytest.raises(Refused):
        drive(unguarded(), perform)
    with pytest.raises(Refused):
        await drive_async(unguarded(), perform_async)
