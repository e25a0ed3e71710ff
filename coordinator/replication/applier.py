"""Apply one Raft entry -- one command or a batch -- to the record cache.

Shared by the Raft replica and the in-process test replica, so both answer a
retried request id, a rejected command and a read barrier the same way, and
forget old answers the same way (coordinator/core/dedupe.py): every answer is
kept under its sender's identity and request id with its command's fingerprint,
queued when recorded, and each applied entry forgets a bounded number of the
oldest ones once their requests fall behind the watermark.
"""
from __future__ import annotations

import dataclasses

from coordinator import wire
from coordinator.core import data_uris, dedupe
from coordinator.core.commands import (
    CheckpointResult, ClockResult, Command, CommitCheckpoint, Entry, Failure, Proposal, ReadBarrier, ResetDedupeClock,
    Result, decode_result, encode_result,
)
from coordinator.core.dedupe import DedupeClock
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.state_machine import apply
from coordinator.storage.state import (
    DEDUPE_CLOCK_KEY, KvState, RecordCache, answer_key, kept_answer, read_kept_answer, read_remembered_item,
    remembered_item, remembered_key, unattributed_key,
)

Answer = bytes | list[bytes]


def apply_entry_bytes(records: RecordCache, data: bytes, decoded: Proposal | None = None) -> Answer:
    """The encoded result (a list of them for a batch); writes go to records.pending.

    `decoded`: the proposer's own decoding of exactly these bytes, which spares the
    leader decoding an entry it has just built."""
    if decoded is None:
        try:
            decoded = wire.proposal_from_bytes(data)
        except Exception as exc:  # undecodable bytes never come from our own proposers
            return encode_result(Failure.of(Rejection.because(ReasonCode.MALFORMED_ENTRY,
                                                              f"undecodable log entry: {exc}")))
    return apply_proposal(records, decoded)


def apply_proposal(records: RecordCache, proposal: Proposal) -> Answer:
    if all(isinstance(e, Failure) or isinstance(e.command, ReadBarrier) for e in proposal.entries):
        # Nothing to remember: reads leave the store (and its digest) untouched.
        answers = [encode_result(e if isinstance(e, Failure) else apply(KvState(records), e))
                   for e in proposal.entries]
        return answers if proposal.batch else answers[0]
    before = records.get(DEDUPE_CLOCK_KEY, DedupeClock) or DedupeClock()
    clock = dedupe.advance(dedupe.attributing(before), proposal.proposed_at, proposal.dedupe_window_s)
    answers = []
    tail = clock.tail
    for entry in proposal.entries:
        if isinstance(entry, Failure):
            answers.append(encode_result(entry))
            continue
        if isinstance(entry.command, ResetDedupeClock):
            previous, clock = clock, dedupe.reset(clock, proposal.proposed_at, tail)
            answers.append(encode_result(ClockResult(clock.clock_ms / 1000, previous.clock_ms / 1000)))
            continue
        answer, recorded = _apply_one(records, entry, clock, proposal, tail)
        answers.append(answer)
        tail += recorded
    if tail != clock.tail:
        clock = dataclasses.replace(clock, tail=tail)
    clock = _forget(records, clock, dedupe.prune_budget(tail - before.tail))
    if clock != before:
        records.pending[DEDUPE_CLOCK_KEY] = clock
    return answers if proposal.batch else answers[0]


def _apply_one(records: RecordCache, entry: Entry, clock: DedupeClock, proposal: Proposal,
               tail: int) -> tuple[bytes, int]:
    """The answer, and how many answers were recorded (0 or 1, under sequence `tail`)."""
    state = KvState(records)
    if isinstance(entry.command, ReadBarrier):
        return encode_result(apply(state, entry)), 0
    namespace = dedupe.namespace(entry.principal)
    key = answer_key(namespace, entry.request_id)
    fingerprint = dedupe.fingerprint(entry.command)
    prior = dedupe_record(state, key)
    issued_ms = dedupe.to_ms(entry.issued_at or entry.proposed_at)
    if prior is not None:
        remembered, answer = read_kept_answer(prior)
        refusal = dedupe.reuse(entry.request_id, remembered, fingerprint)
        if refusal is None:
            return _given_back(answer, entry.command), 0
    elif dedupe.may_hold_unattributed(clock) and dedupe_record(state, unattributed_key(entry.request_id)) is not None:
        refusal = dedupe.unattributed(entry.request_id)
    else:
        refusal = dedupe.admit(clock, issued_ms, proposal.dedupe_window_s)
    if refusal is not None:  # not recorded: refused again on every retry
        return encode_result(Failure.of(refusal)), 0
    result = apply(state, entry, validated=proposal.validated)
    if not isinstance(result, Failure):
        records.pending.update(state.writes)
    encoded = encode_result(result)
    records.pending[key] = kept_answer(fingerprint, _kept(result, entry.command, encoded))
    records.pending[remembered_key(tail)] = remembered_item(issued_ms, namespace, entry.request_id)
    return encoded, 1


def _kept(result: Result, command: Command, encoded: bytes) -> bytes:
    """The answer as the dedupe table keeps it. A checkpoint committed with its state
    inline keeps the answer without that state (up to 8 KiB, kept for the whole window
    otherwise): a retry's fingerprint must match its command's, so the retry carries the
    same data URI, and _given_back puts it back."""
    if (isinstance(result, CheckpointResult) and isinstance(command, CommitCheckpoint)
            and data_uris.is_inline(result.checkpoint.blob_uri)
            and result.checkpoint.blob_uri == command.checkpoint.blob_uri):
        return encode_result(_with_blob_uri(result, data_uris.SCHEME))
    return encoded


def _given_back(answer: bytes, command: Command) -> bytes:
    """A remembered answer as it was first given (the inverse of _kept)."""
    if not (isinstance(command, CommitCheckpoint) and data_uris.is_inline(command.checkpoint.blob_uri)):
        return answer
    result = decode_result(answer)
    if not (isinstance(result, CheckpointResult) and result.checkpoint.blob_uri == data_uris.SCHEME):
        return answer
    return encode_result(_with_blob_uri(result, command.checkpoint.blob_uri))


def _with_blob_uri(result: CheckpointResult, blob_uri: str) -> CheckpointResult:
    return dataclasses.replace(result, checkpoint=dataclasses.replace(result.checkpoint, blob_uri=blob_uri))


def dedupe_record(state: KvState, key: bytes) -> bytes | None:
    """What the dedupe table holds under `key` (an answer, or an unattributed request id).

    Chaos seam: `no-dedupe` (chaos/planted.py) replaces it with one that remembers
    nothing, so a retried request is applied again."""
    return state.raw(key)


def _forget(records: RecordCache, clock: DedupeClock, budget: int) -> DedupeClock:
    head = clock.head
    while head < clock.tail and budget > 0:
        item = records.get(remembered_key(head), bytes)
        if item is not None:
            issued_ms, key = read_remembered_item(item)
            if not dedupe.forgettable(clock, issued_ms) and head >= clock.forget_before:
                break
            records.pending[key] = None
            records.pending[remembered_key(head)] = None
        head += 1
        budget -= 1
    return clock if head == clock.head else dataclasses.replace(clock, head=head)
