"""Group commit on the leader: propose commands, await their durable results.

Proposals are batched: at most MAX_BATCHES_IN_FLIGHT Raft entries are
outstanding, and whatever is queued meanwhile goes into the next one (one
pickle, one journal record, one AppendEntries item, one apply callback), each
command keeping its own request id and result. Under load a batch forms during
one Raft round trip; a lone proposal is sent alone and at once, so batching
costs no latency when there is none to hide.

Every way a proposal can end is a result or one of four exceptions (Rejection,
NotLeader, Overloaded, OutcomeUnknown), so the RPC layer and the leader's own
loops tell the same outcomes apart without knowing how proposals travel.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

from coordinator import tracing, wire
from coordinator.api.v1 import log_pb2
from coordinator.config import NodeConfig
from coordinator.core.commands import Entry, Proposal, Result, decode_result
from coordinator.core.validation import validate
from coordinator.observability import metrics
from coordinator.replication.leader_clock import LeaderClock
from coordinator.replication.read_index import NOT_LEADER
from coordinator.replication.read_points import NO_READ_POINT_IN_TIME, ReadPoints
from coordinator.replication.replica import BatchTrace, ClockAgreement, NotLeader, Overloaded, Replica

DEFAULT_DEDUPE_WINDOW_S = NodeConfig.dedupe_window_s  # one default, the config's
# A batch without an answer this long is given up: its outcome is unknown.
ANSWER_TIMEOUT_S = 10.0
# Entries per Raft entry at most: bounds one apply's work and one message's size.
MAX_BATCH = 256
MAX_BATCHES_IN_FLIGHT = 2


def _trace(queued: _Queued) -> None:
    """The stages of an answered, traced proposal, as spans under the call's span. A
    replica that does not say when it began to apply (committed_ns 0) shows its apply
    inside the replication stage."""
    if queued.span is None or not queued.applied_ns:
        return
    committed_ns = queued.batch.committed_ns if queued.batch is not None else 0
    committed_ns = committed_ns or queued.applied_ns
    admission = (("raftpoint.admission", queued.arrived_ns, queued.queued_ns),) if queued.arrived_ns else ()
    tracing.stage_spans((*admission,
                         ("raftpoint.batch", queued.queued_ns, queued.sent_ns),
                         ("raftpoint.replicate", queued.sent_ns, committed_ns),
                         ("raftpoint.apply", committed_ns, queued.applied_ns),
                         ("raftpoint.answer", queued.applied_ns, time.time_ns())))


class OutcomeUnknown(Exception):
    """The command may or may not have been applied: retrying it with the same request
    id is safe, because the state machine answers a retried id from its dedupe table."""


@dataclass
class _Queued:
    message: log_pb2.LogEntry
    entry: Entry
    future: asyncio.Future
    # time.time_ns() of each stage, for the trace's spans (tracing.stage_spans)
    queued_ns: int = 0
    sent_ns: int = 0
    applied_ns: int = 0  # on the Raft thread: committed on a majority and applied here
    # Only for a call whose span records: that span, when the call reached admission, its batch's trace.
    span: tracing.SpanRef | None = None
    arrived_ns: int = 0
    batch: BatchTrace | None = None


class Batcher:
    def __init__(self, replica: Replica, dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
                 clock: LeaderClock | None = None) -> None:
        self.replica = replica
        self.clock = clock or LeaderClock()
        self.dedupe_window_s = dedupe_window_s
        self._queue: list[_Queued] = []
        self._flush_scheduled = False
        self._in_flight = 0
        self.waiting = 0  # proposals not yet answered (queued or in Raft): admission bounds it
        self._clocks_awaited_in_term = -1
        self._read_points = ReadPoints(lambda done: self.replica.read_index(done), ANSWER_TIMEOUT_S)

    async def propose(self, entry: Entry) -> Result:
        """Propose one command (its proposed_at is set when it is sent) and await its result.

        Raises Rejection for an invalid command, which never reaches the log;
        NotLeader, Overloaded or OutcomeUnknown when there is no result. A caller
        that is cancelled while waiting leaves its command out of any batch not yet sent.
        """
        validate(entry.command)
        await self._hear_voters_clocks()
        message = wire.entry_to_pb(entry)
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        proposed = time.perf_counter()
        span = tracing.recording_span()
        queued = _Queued(message, entry, future, queued_ns=time.time_ns(), span=span,
                         arrived_ns=tracing.arrived_ns() if span is not None else 0)
        self._queue.append(queued)
        if not self._flush_scheduled and self._in_flight < MAX_BATCHES_IN_FLIGHT:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        self.waiting += 1
        try:
            answer = await future
            metrics.PROPOSAL_SECONDS.observe(time.perf_counter() - proposed)
            _trace(queued)
            return decode_result(answer)
        finally:
            self.waiting -= 1

    async def barrier(self) -> None:
        """A linearizable read point (Raft's ReadIndex, replication.read_index): returns
        once this node has confirmed with a majority that it still leads and has applied
        everything committed before the call. No log entry, no journal write; reads that
        arrive together share one request (replication.read_points).

        Raises NotLeader, or OutcomeUnknown when no read point came in time.

        Chaos seam: `stale-read` (chaos/planted.py) replaces it with one that returns at once."""
        outcome = await self._read_points.wait()
        if outcome == NOT_LEADER:
            raise NotLeader(self.replica.leader_raft_address())
        if outcome is not None:
            raise OutcomeUnknown(outcome if outcome == NO_READ_POINT_IN_TIME else f"no read point: {outcome}")

    async def _hear_voters_clocks(self) -> None:
        """A leader that has not heard a majority's clocks lately (just elected after every
        node restarted) stamps nothing before one read round, which every voter answers
        with its clock: its own clock is then held to theirs (leader_clock's ceiling).
        Once a term: voters too old to stamp their clocks leave the clock unbounded, as before."""
        agreement = self.replica
        if (not isinstance(agreement, ClockAgreement) or not agreement.is_leader()
                or agreement.agreed_time(0.0) is not None):
            return
        term = self.replica.status().term
        if term == self._clocks_awaited_in_term:
            return
        self._clocks_awaited_in_term = term
        try:
            await self.barrier()
        except (NotLeader, OutcomeUnknown):
            pass  # the proposal itself then fails or goes on as it would have

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
        proposed_at = self.clock.now()
        entries = tuple(dataclasses.replace(q.entry, proposed_at=proposed_at) for q in batch)
        message = wire.proposal_to_pb(proposed_at, self.dedupe_window_s, [q.message for q in batch])
        decoded = Proposal(proposed_at, self.dedupe_window_s, entries, batch=len(batch) > 1, validated=True)
        loop = asyncio.get_running_loop()
        futures = [q.future for q in batch]
        released = False
        sent_ns = time.time_ns()
        for q in batch:
            q.sent_ns = sent_ns
        spans = [q.span for q in batch if q.span is not None]
        trace = BatchTrace(tuple(spans)) if spans else None
        if trace is not None:
            for q in batch:
                q.batch = trace

        def settle(result: bytes | list[bytes] | None, error: str | None, applied_ns: int = 0) -> None:
            """On the answer (`applied_ns`: when the Raft thread had it), or after
            ANSWER_TIMEOUT_S without one: never both."""
            nonlocal released
            if not released:
                released = True
                guard.cancel()
                for q in batch:
                    q.applied_ns = applied_ns
                _settle(futures, result, error)
                self._released()

        def on_done(result: bytes | list[bytes] | None, error: str | None) -> None:  # on the Raft thread
            loop.call_soon_threadsafe(settle, result, error, time.time_ns())

        try:
            self.replica.propose(message.SerializeToString(), on_done, decoded, trace)
        except Exception as exc:  # NotLeader, Overloaded, or a bug: never leave a caller waiting
            failure = exc if isinstance(exc, (NotLeader, Overloaded)) else OutcomeUnknown(f"not proposed: {exc!r}")
            for future in futures:
                if not future.done():
                    future.set_exception(failure)
            return
        self._in_flight += 1
        guard = loop.call_later(ANSWER_TIMEOUT_S, settle, None, "no result in time")


def _settle(futures: list[asyncio.Future], result: bytes | list[bytes] | None, error: str | None) -> None:
    answers = result if isinstance(result, list) else [result] * len(futures)
    for future, answer in zip(futures, answers):
        if future.done():
            continue
        if error is not None or answer is None:
            future.set_exception(OutcomeUnknown(error or "no result"))
        else:
            future.set_result(answer)
