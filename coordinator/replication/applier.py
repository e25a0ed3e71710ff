"""Apply one encoded log entry to the record cache, answering retries from the dedupe table.

Shared by the Raft replica and the in-process test replica, so both answer a
retried request id, a rejected command and a read barrier the same way.
"""
from __future__ import annotations

from coordinator import wire
from coordinator.core.commands import Failure, ReadBarrier, encode_result
from coordinator.core.errors import Code, Rejection
from coordinator.core.state_machine import apply
from coordinator.storage.state import KvState, RecordCache, result_key


def apply_entry_bytes(records: RecordCache, data: bytes) -> bytes:
    """The encoded result; successful writes and the dedupe record go to records.pending."""
    try:
        entry = wire.entry_from_bytes(data)
    except Rejection as rejection:
        return encode_result(Failure.of(rejection))
    except Exception as exc:  # undecodable bytes never come from our own proposers
        return encode_result(Failure(Code.INVALID_ARGUMENT, f"undecodable log entry: {exc}"))
    if isinstance(entry.command, ReadBarrier):
        return encode_result(apply(KvState(records), entry))
    key = result_key(entry.request_id)
    state = KvState(records)
    prior = state.raw(key)
    if prior is not None:
        return prior
    result = apply(state, entry)
    if not isinstance(result, Failure):
        records.pending.update(state.writes)
    encoded = encode_result(result)
    records.pending[key] = encoded
    return encoded
