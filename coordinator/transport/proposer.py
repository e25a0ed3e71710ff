"""Bridge from asyncio handlers to the Raft thread: propose, await the durable result.

Every outcome a client can see is decided here: the result, a rejection with
its reason, a redirect to the leader, or "outcome unknown, retry with the same
request_id" (safe because the state machine answers a retried id from its
dedupe table).
"""
from __future__ import annotations

import asyncio
import time
import uuid

import grpc
from google.protobuf.message import Message

from coordinator.api.v1 import log_pb2
from coordinator.core import ids
from coordinator.core.commands import Failure, Result, decode_result
from coordinator.core.errors import Rejection
from coordinator.core.validation import validate
from coordinator.replication.replica import NotLeader, Overloaded, Replica
from coordinator.transport.status_map import GRPC_CODE, LEADER_METADATA_KEY, details
from coordinator import wire

DEFAULT_TIMEOUT = 10.0


class Proposer:
    def __init__(self, node: Replica) -> None:
        self.node = node

    async def abort_not_leader(self, context: grpc.aio.ServicerContext, leader_raft: str | None) -> None:
        leader = self.node.config.grpc_of(leader_raft)
        if leader:
            context.set_trailing_metadata(((LEADER_METADATA_KEY, leader),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"not the leader; leader is {leader or 'unknown'}")

    async def submit(self, context: grpc.aio.ServicerContext, field: str, message: Message,
                     request_id: str | None = None) -> Result:
        """Validate, propose and await; aborts the RPC on anything but success."""
        if request_id is None:
            request_id = getattr(message, "request_id")
            try:
                ids.check_request_id(request_id)
            except Rejection as r:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, details(r.field, r.reason))
        entry = log_pb2.LogEntry(request_id=request_id, proposed_at=time.time())
        getattr(entry, field).CopyFrom(message)
        try:
            validate(wire.command_from_pb(entry))  # nothing invalid reaches the log
        except Rejection as r:
            await context.abort(GRPC_CODE[r.code], details(r.field, r.reason))
        result = await self.propose(context, entry)
        if isinstance(result, Failure):
            await context.abort(GRPC_CODE[result.code], details(result.field, result.reason))
        return result

    async def barrier(self, context: grpc.aio.ServicerContext) -> None:
        """A linearizable read point: a no-op entry through the log on the current leader."""
        entry = log_pb2.LogEntry(request_id=f"read-{uuid.uuid4().hex}", proposed_at=time.time(),
                                 read_barrier=log_pb2.ReadBarrier())
        await self.propose(context, entry)

    async def propose(self, context: grpc.aio.ServicerContext | None, entry: log_pb2.LogEntry) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def on_done(result: bytes | None, error: str | None) -> None:
            loop.call_soon_threadsafe(_settle, future, result, error)

        try:
            self.node.propose(entry.SerializeToString(), on_done)
        except NotLeader as exc:
            if context is None:
                raise
            await self.abort_not_leader(context, exc.leader_raft)
        except Overloaded as exc:
            if context is None:
                raise
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        remaining = context.time_remaining() if context is not None else None
        client_deadline = remaining is not None and remaining < DEFAULT_TIMEOUT
        try:
            raw = await asyncio.wait_for(asyncio.shield(future), remaining if client_deadline else DEFAULT_TIMEOUT)
        except asyncio.TimeoutError as exc:
            if context is None:
                raise TimeoutError("no result in time") from exc
            # The caller's own deadline ran out: say so, rather than blame the cluster.
            code = grpc.StatusCode.DEADLINE_EXCEEDED if client_deadline else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, "outcome unknown (no result in time); retry with the same request_id")
        except _ProposalFailed as exc:
            if context is None:
                raise TimeoutError(str(exc)) from exc
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"outcome unknown ({exc}); retry with the same request_id")
        return decode_result(raw)


class _ProposalFailed(Exception):
    pass


def _settle(future: asyncio.Future, result: bytes | None, error: str | None) -> None:
    if future.done():
        return
    if error is not None or result is None:
        future.set_exception(_ProposalFailed(error or "no result"))
    else:
        future.set_result(result)
