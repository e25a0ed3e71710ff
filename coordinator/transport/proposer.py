"""Bridge from asyncio handlers to the Raft thread: propose, await the durable result.

Every outcome a client can see is decided here: the result, a rejection with
its reason, a redirect to the leader, or "outcome unknown, retry with the same
request_id" (safe because the state machine answers a retried id from its
dedupe table).

Proposals are batched like a group commit: at most MAX_BATCHES_IN_FLIGHT Raft
entries are outstanding, and whatever is queued meanwhile goes into the next one
(one pickle, one journal record, one AppendEntries item, one apply callback),
each command keeping its own request id and result. Under load a batch forms
during one Raft round trip; a lone proposal is sent alone and at once, so
batching costs no latency when there is none to hide.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import uuid
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message

from coordinator import wire
from coordinator.api.metadata import ISSUED_AT_METADATA_KEY, LEADER_METADATA_KEY
from coordinator.api.v1 import log_pb2
from coordinator.config import NodeConfig
from coordinator.core import ids
from coordinator.core.commands import Entry, Failure, Proposal, Result, decode_result
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.validation import validate
from coordinator.replication.replica import NotLeader, Overloaded, Replica
from coordinator.transport.status_map import abort_with

DEFAULT_TIMEOUT = 10.0
DEFAULT_DEDUPE_WINDOW_S = NodeConfig.dedupe_window_s  # one default, the config's
# Entries per Raft entry at most: bounds one apply's work and one message's size.
MAX_BATCH = 256
MAX_BATCHES_IN_FLIGHT = 2


@dataclass
class _Queued:
    entry: log_pb2.LogEntry
    decoded: Entry
    future: asyncio.Future


class Proposer:
    def __init__(self, node: Replica, dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S) -> None:
        self.node = node
        self.dedupe_window_s = dedupe_window_s
        self._queue: list[_Queued] = []
        self._flush_scheduled = False
        self._in_flight = 0

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
                await abort_with(context, r)
        entry = log_pb2.LogEntry(request_id=request_id, issued_at=await self._issued_at(context))
        getattr(entry, field).CopyFrom(message)
        result = await self.propose(context, entry)
        if isinstance(result, Failure):
            await abort_with(context, result)
        return result

    async def _issued_at(self, context: grpc.aio.ServicerContext) -> float:
        """The client's first-send time from the request metadata; 0 when absent."""
        raw = next((v for k, v in context.invocation_metadata() or () if k == ISSUED_AT_METADATA_KEY), None)
        if raw is None:
            return 0.0
        try:
            issued_at = float(raw)
        except ValueError:
            issued_at = math.nan
        if not (math.isfinite(issued_at) and issued_at > 0):
            await abort_with(context, Rejection.invalid(ISSUED_AT_METADATA_KEY,
                                                        f"must be seconds since the epoch, got {raw!r}"))
        if issued_at > time.time() + self.dedupe_window_s:
            await abort_with(context, Rejection.because(
                ReasonCode.CLOCK_AHEAD, f"more than {self.dedupe_window_s:.0f}s ahead of the coordinator's clock; "
                "check the client's clock", ISSUED_AT_METADATA_KEY))
        return issued_at

    async def barrier(self, context: grpc.aio.ServicerContext | None) -> None:
        """A linearizable read point: a no-op entry through the log on the current leader."""
        await self.propose(context, log_pb2.LogEntry(request_id=f"read-{uuid.uuid4().hex}",
                                                     read_barrier=log_pb2.ReadBarrier()))

    async def propose(self, context: grpc.aio.ServicerContext | None, entry: log_pb2.LogEntry) -> Result:
        """Propose one entry (its proposed_at is set when it is sent) and await its result.

        Invalid input never reaches the log: with a context the RPC is aborted, without
        one the Rejection is raised."""
        try:
            decoded = wire.entry_from_pb(entry, 0.0)
            validate(decoded.command)
        except Rejection as r:
            if context is None:
                raise
            await abort_with(context, r)
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._queue.append(_Queued(entry, decoded, future))
        if not self._flush_scheduled and self._in_flight < MAX_BATCHES_IN_FLIGHT:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        try:
            # gRPC cancels the handler (and so this future) at the caller's deadline;
            # without one, the batch gives up after DEFAULT_TIMEOUT.
            raw = await future
        except NotLeader as exc:
            if context is None:
                raise
            await self.abort_not_leader(context, exc.leader_raft)
        except Overloaded as exc:
            if context is None:
                raise
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except _ProposalFailed as exc:
            if context is None:
                raise TimeoutError(str(exc)) from exc
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"outcome unknown ({exc}); retry with the same request_id")
        return decode_result(raw)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._queue and self._in_flight < MAX_BATCHES_IN_FLIGHT:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            batch = [q for q in batch if not q.future.done()]  # callers that gave up
            if batch:
                self._send(batch)

    def _released(self) -> None:
        self._in_flight -= 1
        if self._queue and not self._flush_scheduled:
            self._flush()

    def _send(self, batch: list[_Queued]) -> None:
        proposed_at = time.time()
        entries = tuple(dataclasses.replace(q.decoded, proposed_at=proposed_at) for q in batch)
        if len(batch) == 1:
            message = batch[0].entry
            message.proposed_at, message.dedupe_window_s = proposed_at, self.dedupe_window_s
        else:
            message = log_pb2.LogEntry(proposed_at=proposed_at, dedupe_window_s=self.dedupe_window_s)
            message.batch.entries.extend(q.entry for q in batch)
        decoded = Proposal(proposed_at, self.dedupe_window_s, entries, batch=len(batch) > 1, validated=True)
        loop = asyncio.get_running_loop()
        futures = [q.future for q in batch]
        released = False

        def settle(result: bytes | list[bytes] | None, error: str | None) -> None:
            """On the answer, or after DEFAULT_TIMEOUT without one: never both."""
            nonlocal released
            if not released:
                released = True
                guard.cancel()
                _settle(futures, result, error)
                self._released()

        def on_done(result: bytes | list[bytes] | None, error: str | None) -> None:  # on the Raft thread
            loop.call_soon_threadsafe(settle, result, error)

        try:
            self.node.propose(message.SerializeToString(), on_done, decoded)
        except Exception as exc:  # NotLeader, Overloaded, or a bug: never leave a caller waiting
            failure = exc if isinstance(exc, (NotLeader, Overloaded)) else _ProposalFailed(f"not proposed: {exc!r}")
            for future in futures:
                if not future.done():
                    future.set_exception(failure)
            return
        self._in_flight += 1
        guard = loop.call_later(DEFAULT_TIMEOUT, settle, None, "no result in time")


class _ProposalFailed(Exception):
    pass


def _settle(futures: list[asyncio.Future], result: bytes | list[bytes] | None, error: str | None) -> None:
    answers = result if isinstance(result, list) else [result] * len(futures)
    for future, answer in zip(futures, answers):
        if future.done():
            continue
        if error is not None or answer is None:
            future.set_exception(_ProposalFailed(error or "no result"))
        else:
            future.set_result(answer)
