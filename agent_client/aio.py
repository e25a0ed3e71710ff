"""asyncio face of AgentClient.

The client's work is a few RPCs plus blob and fsync I/O per call; running each call
in a worker thread (asyncio.to_thread) keeps the event loop free without a second
implementation of the protocol to keep in step. Background heartbeats and orders
run in the same daemon threads as for sync users. For raw async RPCs use
agent_client.connection.AsyncConnection.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from agent_client.agent import AgentClient, Restored
from coordinator.api.v1 import coordinator_pb2 as pb


class AsyncAgentClient:
    """Same constructor arguments as AgentClient; every method is awaitable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sync = AgentClient(*args, **kwargs)

    async def register(self) -> pb.RegisterResponse:
        return await asyncio.to_thread(self.sync.register)

    async def restore(self) -> Restored:
        return await asyncio.to_thread(self.sync.restore)

    async def sync_orders(self, window: float = 0.5) -> list[pb.Order]:
        return await asyncio.to_thread(self.sync.sync_orders, window)

    async def checkpoint(self, state: Any = None) -> int:
        return await asyncio.to_thread(self.sync.checkpoint, state)

    def wrap(self, payload: bytes, to: str) -> bytes:
        """Local only (no I/O): not awaited."""
        return self.sync.wrap(payload, to)

    async def unwrap(self, envelope: bytes) -> bytes | None:
        return await asyncio.to_thread(self.sync.unwrap, envelope)

    async def side_effect(self, key: str, fn: Callable[[], Any], *, hold_until_stable: bool = False) -> Any:
        return await asyncio.to_thread(self.sync.side_effect, key, fn, hold_until_stable=hold_until_stable)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> "AsyncAgentClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
