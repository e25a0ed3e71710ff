"""CoordinatorNode replicas in one process (loopback): apply, dedupe, group commit, snapshots."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from coordinator import config
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core.commands import CheckpointResult, Failure, decode_result
from coordinator.replication import snapshot_file
from coordinator.replication.node import CoordinatorNode, NotLeader
from coordinator.replication.replica import MembershipOutcome
from coordinator.storage import open_store
from coordinator.storage.state import answer_key

DEADLINE = 20.0


def wait_for(predicate: Callable[[], object], what: str, timeout: float = DEADLINE) -> object:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    def __init__(self, root: Path, size: int = 3, **overrides: object) -> None:
        self.root = root
        self.addresses = [f"127.0.0.1:{p}" for p in free_ports(size)]
        self.overrides = overrides
        self.nodes: dict[int, CoordinatorNode] = {}
        for i in range(size):
            self.start(i)

    def config(self, i: int) -> config.NodeConfig:
        flags = {"raft_address": self.addresses[i], "peers": tuple(a for a in self.addresses if a != self.addresses[i]),
                 "data_dir": str(self.root / f"n{i}"), "raft_password": "test-cluster-secret", "raft_min_timeout": 0.3,
                 "raft_max_timeout": 0.6,
                 "insecure": True,  # Raft nodes without a gRPC server: no TLS material to give
                 **self.overrides}
        return config.load(env={}, flags=flags)

    def start(self, i: int) -> CoordinatorNode:
        cfg = self.config(i)
        store = open_store("lmdb", Path(cfg.data_dir) / "state")
        self.nodes[i] = CoordinatorNode(cfg, store)
        return self.nodes[i]

    def stop(self, i: int) -> None:
        self.nodes.pop(i).close()

    def leader(self) -> CoordinatorNode:
        return wait_for(lambda: next((n for n in self.nodes.values() if n.is_leader()), None), "a leader")

    def propose(self, entry: log_pb2.LogEntry, node: CoordinatorNode | None = None) -> object:
        node = node or self.leader()
        done = threading.Event()
        box: list = []

        def callback(result: bytes | None, error: str | None) -> None:
            box.append((result, error))
            done.set()

        node.propose(entry.SerializeToString(), callback)
        assert done.wait(DEADLINE), "no answer"
        result, error = box[0]
        assert error is None, error
        return decode_result(result)

    def converged(self) -> bool:
        """Every node applied the same entries and its store holds them all (answers come
        before the store's background commit: equal stores alone can all lag behind)."""
        nodes = list(self.nodes.values())
        return (all(n.store_holds_applied() for n in nodes) and len({n.status().raft_applied_index for n in nodes}) == 1
                and len({n.digest_with_index() for n in nodes}) == 1)

    def close(self) -> None:
        for i in list(self.nodes):
            self.stop(i)


# Imported by other modules: named apart from the fixture (docs/developing.md).
@pytest.fixture(name="cluster")
def cluster_fixture(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.close()


def create_group(rid: str = "g-1", group: str = "g") -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=rid, proposed_at=1.0, create_group=pb.CreateGroupRequest(
        request_id=rid, spec=pb.GroupSpec(group=group, mode=pb.CIC_BCS)))


def register(rid: str, agent: str, group: str = "g") -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=rid, proposed_at=2.0, register=pb.RegisterRequest(secret=b"s" * 16, 
        request_id=rid, group=group, agent_id=agent))


def commit(rid: str, agent: str, index: int, incarnation: int = 1, group: str = "g") -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=rid, proposed_at=3.0, commit_checkpoint=pb.CommitCheckpointRequest(
        request_id=rid, token=pb.FencingToken(secret=b"s" * 16, incarnation=incarnation),
        checkpoint=pb.CheckpointMeta(group=group, agent_id=agent, index=index, kind=pb.BASIC,
                                     blob_uri=f"file:///b/{index}", sha256="a" * 64, size=10)))


def one_node_with_checkpoints(root: Path, checkpoints: int) -> Cluster:
    """A running one-node cluster holding group g, its agent a and checkpoints 1..`checkpoints`."""
    cluster = Cluster(root, size=1)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        for i in range(1, checkpoints + 1):
            cluster.propose(commit(f"c-{i}", "a", i))
    except BaseException:
        cluster.close()
        raise
    return cluster


def test_writes_replicate_and_duplicates_apply_once(cluster: Cluster) -> None:
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    first = cluster.propose(commit("c-1", "a", 1))
    assert isinstance(first, CheckpointResult)
    assert cluster.propose(commit("c-1", "a", 1)) == first  # same request id: the first answer
    again = cluster.propose(commit("c-2", "a", 1))  # a new request for the same index is a no-op
    assert isinstance(again, CheckpointResult) and again.checkpoint == first.checkpoint
    wait_for(cluster.converged, "replicas to converge")
    for node in cluster.nodes.values():
        assert [c.index for c in node.read_state().checkpoints("g", "a")] == [1]


def test_rejected_command_leaves_state_identical(cluster: Cluster) -> None:
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    wait_for(cluster.converged, "replicas to converge")
    before = {i: n.state_digest() for i, n in cluster.nodes.items()}
    result = cluster.propose(commit("bad-1", "a", 1, incarnation=9))
    assert isinstance(result, Failure) and result.field == "token.incarnation"
    wait_for(cluster.converged, "replicas to converge")
    assert {i: n.state_digest() for i, n in cluster.nodes.items()} == before


def test_follower_refuses_proposals(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    wait_for(lambda: follower.leader_raft_address() == leader.config.raft_address, "follower to know the leader")
    with pytest.raises(NotLeader) as info:
        follower.propose(create_group().SerializeToString(), lambda r, e: None)
    assert info.value.leader_raft == leader.config.raft_address


def test_restart_after_compaction_restores_from_our_snapshot(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, compaction_min_entries=20, compaction_min_time=0.2)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        victim = next(i for i, n in cluster.nodes.items() if not n.is_leader())
        cluster.stop(victim)
        for i in range(1, 80):
            cluster.propose(commit(f"c-{i}", "a", i))
        leader = cluster.leader()
        wait_for(lambda: leader.last_snapshot is not None and leader.last_snapshot.applied_index > 40,
                 "the leader to compact its log")
        assert leader.status().log_entries < 79
        cluster.start(victim)
        wait_for(cluster.converged, "the restarted node to catch up")
        snap = Path(cluster.config(victim).data_dir) / "raft.snapshot"
        with open(snap, "rb") as f:
            assert snapshot_file.read_header(f).applied_index > 0
        assert [c.index for c in cluster.nodes[victim].read_state().checkpoints("g", "a")] == list(range(1, 80))
    finally:
        cluster.close()


def test_restart_skips_entries_already_in_the_store(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.propose(create_group())
        cluster.propose(register("r-1", "a"))
        for i in range(1, 6):
            cluster.propose(commit(f"c-{i}", "a", i))
        wait_for(cluster.converged, "replicas to converge")
        digest = cluster.nodes[0].digest()
        applied = cluster.nodes[0].store.applied_index
        cluster.stop(0)
        node = cluster.start(0)
        wait_for(lambda: node.status().raft_applied_index >= applied, "journal replay")
        assert node.store.applied_index == applied and node.digest() == digest
    finally:
        cluster.close()


def test_replicas_forget_old_answers_identically(cluster: Cluster) -> None:
    cluster.propose(create_group())
    cluster.propose(register("r-1", "a"))
    for i in range(1, 60):  # one write a second under a 10 s dedupe window
        entry = commit(f"c-{i}", "a", i)
        entry.proposed_at, entry.issued_at, entry.dedupe_window_s = 100.0 + i, 100.0 + i, 10.0
        cluster.propose(entry)
    wait_for(cluster.converged, "replicas to converge")  # content digests include the dedupe table
    for node in cluster.nodes.values():
        assert node.read_state().raw(answer_key("", "c-1")) is None
        assert node.read_state().raw(answer_key("", "c-59")) is not None
    late = commit("c-1", "a", 1)
    late.proposed_at, late.issued_at, late.dedupe_window_s = 160.0, 101.0, 10.0
    result = cluster.propose(late)
    assert isinstance(result, Failure) and "too old to deduplicate" in result.reason
    wait_for(cluster.converged, "replicas to converge")


def test_a_second_membership_change_is_refused_until_the_first_is_applied(cluster: Cluster) -> None:
    """Raft's single-server changes: pysyncobj 0.3.17 checks for a change in progress
    but never records one (pysyncobj_adapter.OneMembershipChangeAtATime). With the
    followers stopped the first change cannot commit, so it stays in progress."""
    leader = cluster.leader()
    cluster.propose(create_group())  # the leader's no-op is applied: changes are taken from here on
    for i in [i for i, n in cluster.nodes.items() if n is not leader]:
        cluster.stop(i)
    first, second = (f"127.0.0.1:{p}" for p in free_ports(2))
    outcomes: dict[str, MembershipOutcome] = {}
    leader.change_membership(first, add=True, callback=lambda outcome, why: outcomes.setdefault(first, outcome))
    leader.change_membership(second, add=True, callback=lambda outcome, why: outcomes.setdefault(second, outcome))
    wait_for(lambda: second in outcomes, "the second change decided")
    assert outcomes[second] is MembershipOutcome.REFUSED
    assert outcomes.get(first) is not MembershipOutcome.APPLIED  # no majority to commit it
