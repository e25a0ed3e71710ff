"""Readers share decoded records by their bytes: a changed record is decoded afresh, never served stale."""
from __future__ import annotations

from coordinator.core.model import Agent, Group, GroupSpec
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import DecodeMemo, KvState, RecordCache


def commit(store: MemoryStore, index: int, *records: object) -> None:
    state = KvState(store)
    for record in records:
        state.put_group(record) if isinstance(record, Group) else state.put_agent(record)
    store.commit(state.encoded_writes(), index)


def test_equal_bytes_are_decoded_once_and_a_change_is_seen() -> None:
    store, memo = MemoryStore(), DecodeMemo()
    commit(store, 1, Group(GroupSpec("g"), members=("a",)), Agent("g", "a", 1))
    first, second = KvState(RecordCache(store, memo)), KvState(RecordCache(store, memo))
    assert first.group("g") is second.group("g")  # one decoding, shared by both readers
    commit(store, 2, Group(GroupSpec("g"), members=("a", "b")), Agent("g", "a", 2))
    third = KvState(RecordCache(store, memo))
    assert third.group("g").members == ("a", "b") and third.agent("g", "a").incarnation == 2


def test_the_memo_is_bounded() -> None:
    store, memo = MemoryStore(), DecodeMemo(limit=2, max_record_bytes=10_000)
    for n in range(5):
        commit(store, n + 1, Agent("g", "a", n + 1))
        assert KvState(RecordCache(store, memo)).agent("g", "a").incarnation == n + 1
    assert len(memo._decoded) <= 2
    big = Group(GroupSpec("g"), members=tuple(f"agent-{i}" for i in range(2000)))  # over max_record_bytes
    commit(store, 9, big)
    assert KvState(RecordCache(store, memo)).group("g") == big and len(memo._decoded) <= 2
