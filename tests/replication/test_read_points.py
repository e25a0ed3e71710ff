"""Reads share read-index requests: one in flight at a time, and a read is served only by
a request made after it arrived."""
from __future__ import annotations

import asyncio
from typing import Callable

import pytest

from coordinator.replication import batcher as batcher_module
from coordinator.replication import read_points
from coordinator.replication.batcher import Batcher, OutcomeUnknown
from coordinator.replication.read_index import LEADER_CHANGED, NOT_LEADER
from coordinator.replication.replica import NotLeader
from tests.replication.test_batcher import settle_loop


class HeldReads:
    """Records each read-index request and answers it only when the test says so."""

    def __init__(self) -> None:
        self.requests: list[Callable[[str | None], None]] = []
        self.leader = True

    def read_index(self, done: Callable[[str | None], None]) -> None:
        if not self.leader:
            raise NotLeader("127.0.0.1:1")
        self.requests.append(done)

    def leader_raft_address(self) -> str:
        return "127.0.0.1:1"


def reads(b: Batcher, n: int) -> list[asyncio.Task]:
    return [asyncio.create_task(b.barrier()) for _ in range(n)]


async def in_flight_then(b: Batcher, first: int, then: int) -> tuple[list[asyncio.Task], list[asyncio.Task]]:
    """`first` reads, whose request goes out, then `then` reads while it is in flight."""
    early = reads(b, first)
    await settle_loop()
    late = reads(b, then)
    await settle_loop()
    return early, late


async def requested(replica: HeldReads, n: int, what: str) -> None:
    """Until `n` requests were made (a busy request's successor waits a window)."""
    deadline = asyncio.get_running_loop().time() + 10
    while len(replica.requests) < n and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert len(replica.requests) == n, f"{len(replica.requests)} requests, expected {n}: {what}"


async def test_reads_arriving_during_a_request_share_the_next_one() -> None:
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    first, later = await in_flight_then(b, 1, 4)
    assert len(replica.requests) == 1, f"{len(replica.requests)} requests for reads that could share one"
    replica.requests[0](None)
    await settle_loop()
    assert first[0].done() and first[0].exception() is None
    # A request made before a read arrived proves nothing about leadership after it.
    assert not any(t.done() for t in later), "a read was served by a request made before it arrived"
    assert len(replica.requests) == 2
    replica.requests[1](None)
    await asyncio.wait_for(asyncio.gather(*later), 5)
    assert len(replica.requests) == 2


async def test_a_request_without_an_answer_fails_its_reads_and_lets_the_next_go(monkeypatch) -> None:
    monkeypatch.setattr(batcher_module, "ANSWER_TIMEOUT_S", 0.2)
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    lost, later = await in_flight_then(b, 2, 1)
    assert len(replica.requests) == 1, f"{len(replica.requests)} requests, expected the second to wait"
    done, _ = await asyncio.wait(lost, timeout=5)
    assert len(done) == 2 and all(isinstance(t.exception(), OutcomeUnknown) for t in lost)
    await requested(replica, 2, "the lost request held up the reads behind it")
    replica.requests[1](None)
    await asyncio.wait_for(later[0], 5)
    replica.requests[0](None)  # a late answer to the lost request changes nothing
    await settle_loop()


async def test_every_read_of_a_group_hears_why_there_is_no_read_point() -> None:
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    replica.leader = False
    with pytest.raises(NotLeader):
        await asyncio.gather(*reads(b, 3))
    replica.leader = True
    for n, (outcome, raised) in enumerate(((NOT_LEADER, NotLeader), (LEADER_CHANGED, OutcomeUnknown)), 1):
        group = reads(b, 3)
        await requested(replica, n, "the reads after a refused request made none")
        replica.requests[-1](outcome)
        done, _ = await asyncio.wait(group, timeout=5)
        assert [type(t.exception()) for t in done] == [raised] * 3, outcome
    served = reads(b, 1)
    await requested(replica, 3, "a read after two failed requests made none")
    replica.requests[-1](None)
    await asyncio.wait_for(served[0], 5)


async def test_reads_whose_callers_gave_up_make_no_request() -> None:
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    first, abandoned = await in_flight_then(b, 1, 2)
    for t in abandoned:
        t.cancel()
    await settle_loop()
    replica.requests[0](None)
    await asyncio.wait_for(first[0], 5)
    await settle_loop()
    assert len(replica.requests) == 1, "a request was made for reads nobody waits for"


async def test_after_a_busy_request_the_next_waits_a_window_for_more_reads(monkeypatch) -> None:
    monkeypatch.setattr(read_points, "WINDOW_S", 1.0)
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    busy, waiting = await in_flight_then(b, read_points.BUSY_GROUP, 1)
    replica.requests[0](None)
    await asyncio.wait_for(asyncio.gather(*busy), 5)
    joining = reads(b, 2)  # arrive during the window: they share its request
    await settle_loop()
    assert len(replica.requests) == 1, "the request after a busy one went at once"
    await requested(replica, 2, "none once the window was over")
    replica.requests[1](None)
    await asyncio.wait_for(asyncio.gather(*waiting, *joining), 5)


async def test_after_a_request_of_few_reads_the_next_goes_at_once(monkeypatch) -> None:
    monkeypatch.setattr(read_points, "WINDOW_S", 60.0)
    replica = HeldReads()
    b = Batcher(replica)  # type: ignore[arg-type]
    few, waiting = await in_flight_then(b, read_points.BUSY_GROUP - 1, 1)
    replica.requests[0](None)
    await asyncio.wait_for(asyncio.gather(*few), 5)
    await settle_loop()
    assert len(replica.requests) == 2, "a read waited a window although reads were few"
    replica.requests[1](None)
    await asyncio.wait_for(waiting[0], 5)
