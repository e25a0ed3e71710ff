"""The short path on asyncio: the same as agent_client.session, awaited.

    from agent_client import connect_async

    async with connect_async(endpoints, identity="worker-1") as rp:
        group = await rp.group("team", mode="bcs", create=True)
        async with group.agent("planner", state={"todo": []}) as me:
            envelope = me.send(b"hello", to="writer")        # local, not awaited
            payload = await me.receive(envelope_from_someone)
            await me.checkpoint({"todo": ["draft"]})

Only the I/O differs from the blocking session: the pure parts (mode names, data
directory, which state to start from) are the blocking session's own functions.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from agent_client.aio import AsyncAgentClient, TaskLock
from agent_client.blobstore import BlobStore
from agent_client.connection import AsyncConnection, Rejected
from agent_client.group_spec import check_mode, create_request, get_request
from agent_client.session import AgentBase, SessionBase, missing, starting_state


class AsyncAgent(AgentBase):
    """agent_client.session.Agent on asyncio; the client is `client` (AsyncAgentClient)."""

    client: AsyncAgentClient

    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | Path,
                 initial: Any, **options: Any) -> None:
        super().__init__(initial)
        self.client = AsyncAgentClient(group, agent_id, endpoints, blob_store, **self.hooks(), **options)

    async def start(self) -> "AsyncAgent":
        async with self.client.atomic():
            await self.client.register()
            self.state = starting_state(await self.client.restore(), self.initial)
            await self.client.sync_orders()
        return self

    def send(self, payload: bytes, to: str) -> bytes:
        """Local only (no I/O), so not awaited."""
        return self.client.wrap(payload, to)

    async def receive(self, envelope: bytes) -> bytes | None:
        return await self.client.unwrap(envelope)

    async def checkpoint(self, state: Any = None) -> int:
        async with self.client.atomic():
            if state is not None:
                self.state = state
            return await self.client.checkpoint()

    def atomic(self) -> TaskLock:
        return self.client.atomic()

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> "AsyncAgent":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncGroup:
    def __init__(self, session: "AsyncRaftpoint", name: str, mode: int) -> None:
        self.session, self.name, self.mode = session, name, mode

    def agent(self, agent_id: str, *, state: Any = None, **options: Any) -> AsyncAgent:
        options.setdefault("tls", self.session.tls)
        options.setdefault("token", self.session.token)
        return AsyncAgent(self.name, agent_id, self.session.endpoints, self.session.blob_store, state, **options)


class AsyncRaftpoint(SessionBase):
    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, **where: Any) -> None:
        super().__init__(endpoints, **where)
        self.conn = AsyncConnection(self.endpoints, deadline=deadline, token=self.token, tls=self.tls)

    async def group(self, name: str, *, mode: str | None = None, create: bool = False, **spec: Any) -> AsyncGroup:
        if create:
            resp = await self.conn.call("AdminService", "CreateGroup", create_request(name, mode, **spec))
            return AsyncGroup(self, name, resp.group.spec.mode)
        try:
            resp = await self.conn.call("AdminService", "GetGroup", get_request(name))
        except Rejected as exc:
            raise missing(name, exc) from exc
        return AsyncGroup(self, name, check_mode(name, mode, resp.group.spec.mode))

    async def close(self) -> None:
        await self.conn.close()

    async def __aenter__(self) -> "AsyncRaftpoint":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def connect_async(endpoints: Sequence[str] | str, **options: Any) -> AsyncRaftpoint:
    """agent_client.session.connect on asyncio."""
    return AsyncRaftpoint([endpoints] if isinstance(endpoints, str) else endpoints, **options)
