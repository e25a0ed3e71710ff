"""Reads by ReadIndex: served once a majority acknowledged a round begun after the read
arrived and the state holds the read index; never from a leader that cannot reach a
majority; no journal write per read."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from coordinator.replication import pysyncobj_adapter
from coordinator.replication.batcher import Batcher, OutcomeUnknown
from coordinator.replication.node import CoordinatorNode, NotLeader
from coordinator.replication.read_index import ReadRounds
from tests.replication.test_node import DEADLINE, Cluster, cluster_fixture, commit, create_group, register, wait_for  # noqa: F401


class Outcomes:
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def __call__(self, outcome: str | None) -> None:
        self.seen.append(outcome)


def test_a_read_waits_for_a_majority_to_acknowledge_a_round_begun_after_it() -> None:
    rounds, first, second = ReadRounds(), Outcomes(), Outcomes()
    rounds.begin(term=3, read_index=10, done=[first])
    assert rounds.stamp() == 1
    rounds.acknowledged("b", term=3, round_=1)
    assert rounds.ready({"b", "c"}, applied_index=10) == [first]  # b and the leader: 2 of 3
    rounds.begin(term=3, read_index=12, done=[second])
    rounds.acknowledged("c", term=3, round_=1)  # an answer to an older round proves nothing new
    assert rounds.ready({"b", "c"}, applied_index=12) == []
    rounds.acknowledged("c", term=2, round_=2)  # another term's answer neither
    assert rounds.ready({"b", "c"}, applied_index=12) == []
    rounds.acknowledged("c", term=3, round_=2)
    assert rounds.ready({"b", "c"}, applied_index=11) == [], "served before its index was applied"
    assert rounds.ready({"b", "c"}, applied_index=12) == [second] and rounds.stamp() is None


def test_five_voters_need_two_acknowledgements_and_one_needs_none() -> None:
    rounds, done = ReadRounds(), Outcomes()
    rounds.begin(term=1, read_index=5, done=[done])
    rounds.acknowledged("b", term=1, round_=1)
    assert rounds.ready({"b", "c", "d", "e"}, applied_index=5) == []
    rounds.acknowledged("e", term=1, round_=1)
    assert rounds.ready({"b", "c", "d", "e"}, applied_index=5) == [done]
    alone = ReadRounds()
    alone.begin(term=1, read_index=5, done=[done])
    assert alone.ready(set(), applied_index=5) == [done]


def test_a_new_term_forgets_the_old_acknowledgements() -> None:
    rounds, old, new = ReadRounds(), Outcomes(), Outcomes()
    rounds.begin(term=1, read_index=5, done=[old])
    rounds.acknowledged("b", term=1, round_=1)
    assert rounds.abandon() == [old] and len(rounds) == 0
    rounds.begin(term=2, read_index=5, done=[new])
    assert rounds.ready({"b", "c"}, applied_index=9) == []  # b's answer was in term 1
    rounds.acknowledged("b", term=2, round_=2)
    assert rounds.ready({"b", "c"}, applied_index=9) == [new]


def read(node: CoordinatorNode, timeout: float = DEADLINE) -> str | None:
    done, box = threading.Event(), []

    def answered(outcome: str | None) -> None:
        box.append(outcome)
        done.set()

    node.read_index(answered)
    assert done.wait(timeout), "no answer to the read"
    return box[0]


def test_reads_write_nothing_to_the_journal(cluster: Cluster) -> None:
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    leader = cluster.leader()
    wait_for(lambda: pysyncobj_adapter.read_index(leader) <= leader.store.applied_index, "the leader to settle")
    last = pysyncobj_adapter.current_log_index(leader)
    assert [read(leader) for _ in range(50)] == [None] * 50
    assert pysyncobj_adapter.current_log_index(leader) == last, "a read appended to the log"


def test_a_read_sees_every_write_acknowledged_before_it(cluster: Cluster) -> None:
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    leader = cluster.leader()
    for i in range(1, 20):
        cluster.propose(commit(f"c-{i}", "a", i))
        assert read(leader) is None
        assert [c.index for c in leader.read_state().checkpoints("g", "a")][-1] == i


def test_a_follower_refuses_at_once(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    with pytest.raises(NotLeader):
        follower.read_index(lambda outcome: None)


def test_a_leader_cut_off_from_its_followers_serves_no_read(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.propose(create_group())
        leader = cluster.leader()
        leader_index = next(i for i, n in cluster.nodes.items() if n is leader)
        for i in [i for i in cluster.nodes if i != leader_index]:
            cluster.stop(i)
        outcome = read(leader, timeout=DEADLINE)  # answered once it stops leading
        assert outcome is not None, "a leader without a majority served a read"
        assert not leader.is_leader()
    finally:
        cluster.close()


def test_a_new_leader_serves_reads_once_its_own_entry_is_committed(tmp_path: Path) -> None:
    """A new leader's log ends with its no-op, which changes no state: the read waits for
    it to be committed and applied, not for the store to record its index."""
    cluster = Cluster(tmp_path)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        old = cluster.leader()
        assert read(old) is None
        cluster.stop(next(i for i, n in cluster.nodes.items() if n is old))
        new = cluster.leader()
        assert read(new) is None
        assert new.read_state().agent("g", "a") is not None
    finally:
        cluster.close()



async def test_reads_sharing_read_index_requests_see_every_write_acknowledged_before_them(cluster: Cluster) -> None:
    """On a real leader, with readers keeping a shared request in flight all along.
    (Which request serves a read is checked in test_read_points: on a leader that
    stays in office even a too early one shows the write, applied before its answer.)"""
    await asyncio.to_thread(cluster.propose, create_group())
    await asyncio.to_thread(cluster.propose, register("r-1", "a"))
    leader = cluster.leader()
    requests, asked = [0], leader.read_index

    def counted(done) -> None:
        requests[0] += 1
        asked(done)
    leader.read_index = counted  # type: ignore[method-assign]
    batcher, reads, stop = Batcher(leader), [0], asyncio.Event()

    async def reader() -> None:
        while not stop.is_set():
            await batcher.barrier()
            reads[0] += 1
    readers = [asyncio.create_task(reader()) for _ in range(8)]
    try:
        for i in range(1, 16):
            await asyncio.to_thread(cluster.propose, commit(f"c-{i}", "a", i))
            await batcher.barrier()
            seen = [c.index for c in leader.read_state().checkpoints("g", "a")][-1]
            assert seen == i, f"a read after the acknowledged write of checkpoint {i} saw checkpoint {seen}"
    finally:
        stop.set()
        await asyncio.gather(*readers)
    assert requests[0] < reads[0] / 2, f"{requests[0]} read-index requests for {reads[0]} reads: none shared"


async def test_a_deposed_leader_answers_no_shared_read(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        await asyncio.to_thread(cluster.propose, create_group())
        leader = cluster.leader()
        batcher = Batcher(leader)
        await batcher.barrier()
        for i in [i for i, n in cluster.nodes.items() if n is not leader]:
            await asyncio.to_thread(cluster.stop, i)
        outcomes = await asyncio.gather(*(batcher.barrier() for _ in range(8)), return_exceptions=True)
        assert all(isinstance(o, (NotLeader, OutcomeUnknown)) for o in outcomes), \
            f"a leader cut off from its followers answered reads: {outcomes}"
    finally:
        cluster.close()
