"""The proposer's group commit: concurrent proposals share Raft entries, each keeps its
own answer, and the leader's own decoding equals what every follower decodes."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core.commands import Failure, GroupResult
from coordinator.core.errors import Code, Rejection
from coordinator.replication.applier import apply_entry_bytes
from coordinator.replication.replica import NotLeader
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import RecordCache
from coordinator.transport import proposer as proposer_module
from coordinator.transport.proposer import Proposer


class HeldReplica:
    """Records each proposal and answers it only when the test says so."""

    def __init__(self) -> None:
        self.records = RecordCache(MemoryStore())
        self.proposed: list[tuple[bytes, object, object]] = []
        self.leader = True

    def propose(self, data: bytes, callback, decoded=None) -> None:
        if not self.leader:
            raise NotLeader("127.0.0.1:1")
        self.proposed.append((data, callback, decoded))

    def answer(self, i: int) -> None:
        data, callback, _ = self.proposed[i]
        callback(apply_entry_bytes(self.records, data), None)


def create(name: str, mode: int = pb.CIC_BCS) -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=f"cg-{name}-{mode}", create_group=pb.CreateGroupRequest(
        spec=pb.GroupSpec(group=name, mode=mode)))


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_concurrent_proposals_are_batched_and_answered_one_by_one() -> None:
    replica = HeldReplica()
    p = Proposer(replica, dedupe_window_s=600.0)  # type: ignore[arg-type]
    first = [asyncio.create_task(p.propose(None, create(f"g{i}"))) for i in range(5)]
    await settle_loop()
    second = [asyncio.create_task(p.propose(None, create(n))) for n in ("g1", "h1", "h2")]
    await settle_loop()
    third = [asyncio.create_task(p.propose(None, create(n, pb.COORDINATED))) for n in ("g2", "h3")]
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
    p = Proposer(replica)  # type: ignore[arg-type]
    with pytest.raises(Rejection) as info:
        await p.propose(None, create("bad name"))
    assert info.value.field == "spec.group" and replica.proposed == []


async def test_every_caller_hears_of_a_lost_leadership_or_a_lost_answer(monkeypatch) -> None:
    replica = HeldReplica()
    replica.leader = False
    p = Proposer(replica)  # type: ignore[arg-type]
    with pytest.raises(NotLeader):
        await asyncio.gather(*(p.propose(None, create(f"n{i}")) for i in range(3)))
    replica.leader = True
    monkeypatch.setattr(proposer_module, "DEFAULT_TIMEOUT", 0.05)
    lost = [asyncio.create_task(p.propose(None, create(f"l{i}"))) for i in range(3)]
    done, _ = await asyncio.wait(lost, timeout=5)
    assert len(done) == 3 and all(isinstance(t.exception(), TimeoutError) for t in lost)
    later = asyncio.create_task(p.propose(None, create("after")))  # the lost batch freed its slot
    await settle_loop()
    replica.answer(len(replica.proposed) - 1)
    assert isinstance(await asyncio.wait_for(later, 5), GroupResult)
