"""The asyncio session's watch, ended by a retryable status, is sent again after a pause,
unless the watch was replaced or ended meanwhile (then the newer one stands alone)."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from agent_client import agent_stream
from agent_client.agent_stream import AsyncSessionStream, frame
from coordinator.api.v1 import coordinator_pb2 as pb

UNAVAILABLE = pb.FrameStatus(code=grpc.StatusCode.UNAVAILABLE.value[0], message="leader changed")


def _stream(monkeypatch: pytest.MonkeyPatch) -> tuple[AsyncSessionStream, asyncio.Queue[pb.AgentFrame | None]]:
    """A stream with no connection: what it sends lands in a queue; the pause is none."""
    monkeypatch.setattr(agent_stream.random, "uniform", lambda low, high: 0.0)
    stream = AsyncSessionStream(None, on_order=lambda order: None, on_watch_ended=lambda code, text: None)
    stream._out = asyncio.Queue()
    return stream, stream._out


async def _sent(out: asyncio.Queue[pb.AgentFrame | None]) -> list[pb.AgentFrame | None]:
    """What was sent once the loop has run every callback due now (the pause is zero)."""
    for _ in range(3):
        await asyncio.sleep(0)
    return [out.get_nowait() for _ in range(out.qsize())]


async def test_a_watch_ended_by_a_retryable_status_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, out = _stream(monkeypatch)
    watch = stream._watch = frame(7, "watch_orders", pb.WatchOrdersRequest(group="g", agent_id="a"))
    stream._dispatch(pb.CoordinatorFrame(correlation=7, status=UNAVAILABLE))
    assert await _sent(out) == [watch]


async def test_a_watch_replaced_before_the_pause_ends_is_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, out = _stream(monkeypatch)
    stream._watch = frame(7, "watch_orders", pb.WatchOrdersRequest(group="g", agent_id="a"))
    stream._dispatch(pb.CoordinatorFrame(correlation=7, status=UNAVAILABLE))
    stream._watch = frame(8, "watch_orders", pb.WatchOrdersRequest(group="g", agent_id="a"))
    assert await _sent(out) == [], "the replaced watch was sent again beside the newer one"
