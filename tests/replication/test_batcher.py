"""The batcher's group commit: concurrent proposals share Raft entries, each keeps its
own answer, and the leader's own decoding equals what every follower decodes."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coordinator import wire
from coordinator.core.commands import CreateGroup, Entry, Failure, GroupResult
from coordinator.core.errors import Code, Rejection
from coordinator.core.model import GroupSpec, Mode
from coordinator.replication import batcher as batcher_module
from coordinator.replication.applier import apply_entry_bytes
from coordinator.replication.batcher import Batcher, OutcomeUnknown
from coordinator.replication.replica import NotLeader
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import RecordCache


class HeldReplica:
    """Records each proposal and answers it only when the test says so."""

    def __init__(self) -> None:
        self.records = RecordCache(MemoryStore())
        self.proposed: list[tuple[bytes, object, object]] = []
        self.leader = True

    def propose(self, data: bytes, callback, decoded=None, trace=None) -> None:
        if not self.leader:
            raise NotLeader("127.0.0.1:1")
        self.proposed.append((data, callback, decoded))

    def answer(self, i: int) -> None:
        data, callback, _ = self.proposed[i]
        callback(apply_entry_bytes(self.records, data), None)


def create(name: str, mode: Mode = Mode.CIC_BCS) -> Entry:
    return Entry(f"cg-{name}-{mode.name}", 0.0, CreateGroup(GroupSpec(name, mode)))


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_concurrent_proposals_are_batched_and_answered_one_by_one() -> None:
    replica = HeldReplica()
    b = Batcher(replica, dedupe_window_s=600.0)  # type: ignore[arg-type]
    first = [asyncio.create_task(b.propose(create(f"g{i}"))) for i in range(5)]
    await settle_loop()
    second = [asyncio.create_task(b.propose(create(n))) for n in ("g1", "h1", "h2")]
    await settle_loop()
    third = [asyncio.create_task(b.propose(create(n, Mode.COORDINATED))) for n in ("g2", "h3")]
    await settle_loop()
    # Two Raft entries in flight at most: the third group waits for an answer.
    assert [len(d.entries) for _, _, d in replica.proposed] == [5, 3]
    for data, _, decoded in replica.proposed:
        # The leader's decoding is what every follower decodes (it alone may skip validation).
        assert dataclasses.replace(wire.proposal_from_bytes(data), validated=True) == decoded
    replica.answer(0)
    await settle_loop()
    assert [len(d.entries) for _, _, d in replica.proposed] == [5, 3, 2]
    assert all(isinstance(t.result(), GroupResult) for t in first)
    replica.answer(1)
    replica.answer(2)
    await settle_loop()
    assert [t.result().group.spec.name for t in second] == ["g1", "h1", "h2"]
    g2, h3 = (t.result() for t in third)
    assert isinstance(g2, Failure) and g2.code is Code.ALREADY_EXISTS  # its neighbour is unaffected
    assert isinstance(h3, GroupResult)


async def test_invalid_input_is_refused_before_proposing() -> None:
    replica = HeldReplica()
    b = Batcher(replica)  # type: ignore[arg-type]
    with pytest.raises(Rejection) as info:
        await b.propose(create("bad name"))
    assert info.value.field == "spec.group" and replica.proposed == []


async def test_every_caller_hears_of_a_lost_leadership_or_a_lost_answer(monkeypatch) -> None:
    replica = HeldReplica()
    replica.leader = False
    b = Batcher(replica)  # type: ignore[arg-type]
    with pytest.raises(NotLeader):
        await asyncio.gather(*(b.propose(create(f"n{i}")) for i in range(3)))
    replica.leader = True
    monkeypatch.setattr(batcher_module, "ANSWER_TIMEOUT_S", 0.05)
    lost = [asyncio.create_task(b.propose(create(f"l{i}"))) for i in range(3)]
    done, _ = await asyncio.wait(lost, timeout=5)
    assert len(done) == 3 and all(isinstance(t.exception(), OutcomeUnknown) for t in lost)
    later = asyncio.create_task(b.propose(create("after")))  # the lost batch freed its slot
    await settle_loop()
    replica.answer(len(replica.proposed) - 1)
    assert isinstance(await asyncio.wait_for(later, 5), GroupResult)


async def test_each_answered_proposal_is_timed_from_proposal_to_answer() -> None:
    """raftpoint_proposal_seconds, the dashboard's commit latency: one sample per answered
    proposal, as long as it waited; none for one that got no answer."""
    from prometheus_client import REGISTRY

    count = lambda: REGISTRY.get_sample_value("raftpoint_proposal_seconds_count") or 0.0  # noqa: E731
    total = lambda: REGISTRY.get_sample_value("raftpoint_proposal_seconds_sum") or 0.0  # noqa: E731
    replica = HeldReplica()
    b = Batcher(replica)  # type: ignore[arg-type]
    before, before_sum = count(), total()
    answered = asyncio.create_task(b.propose(create("timed")))
    await settle_loop()
    await asyncio.sleep(0.05)
    replica.answer(0)
    assert isinstance(await answered, GroupResult)
    assert count() == before + 1 and total() - before_sum >= 0.05
    replica.leader = False
    with pytest.raises(NotLeader):
        await b.propose(create("unanswered"))
    assert count() == before + 1
