"""Issue-level guarantees on real processes: elections, kill -9, restart, snapshots, dedupe."""
from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.cli.local_cluster import LocalCluster, node_status, wait_for
from coordinator.replication import snapshot_file
from tests.support.cluster import FAST, Client

pytestmark = pytest.mark.cluster


def test_writes_replicate_to_every_node(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    for i in range(1, 11):
        client.commit("a", i)
    cluster.converged()
    statuses = cluster.statuses()
    assert len(statuses) == 3 and sum(s.role == "leader" for s in statuses.values()) == 1
    assert len({s.state_digest for s in statuses.values()}) == 1
    assert client.checkpoints() == list(range(1, 11))


def test_leader_kill_loses_no_acknowledged_write(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    acked = [i for i in range(1, 21) if client.commit("a", i)]
    old = cluster.leader()
    cluster.kill(old.index)
    started = time.monotonic()
    client.commit("a", 21)  # retried until a new leader accepts it
    failover = time.monotonic() - started
    new = cluster.leader()
    assert new.index != old.index
    assert client.checkpoints() == acked + [21]
    assert failover < 10, failover
    cluster.start(old.index)
    cluster.converged()


def test_killed_follower_restarts_and_catches_up(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    follower = next(n for n in cluster.nodes if n.index != cluster.leader().index)
    cluster.kill(follower.index)
    for i in range(1, 31):
        client.commit("a", i)
    cluster.start(follower.index)
    digest = cluster.converged()
    assert node_status(follower.grpc).content_digest == digest


def test_duplicated_request_id_is_applied_once(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    first = client.register("b", rid="same-id")
    second = client.register("b", rid="same-id")  # a retry: answered, not a second registration
    assert first == second and first.incarnation == 1
    assert client.register("b", rid="other-id").incarnation == 2  # a new request is a new registration
    one = client.commit("a", 1, rid="cp-dup")
    assert client.commit("a", 1, rid="cp-dup") == one
    assert client.checkpoints(agent="a") == [1]


def test_rejected_command_leaves_state_byte_identical(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    client.register("a")
    cluster.converged()
    before = {s.state_digest for s in cluster.statuses().values()}
    with pytest.raises(grpc.RpcError) as info:
        client.commit("a", 1, incarnation=7)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "token.incarnation" in info.value.details()
    cluster.converged()
    assert {s.state_digest for s in cluster.statuses().values()} == before


def test_invalid_input_is_named_and_never_proposed(cluster: LocalCluster, client: Client) -> None:
    client.create_group()
    # A proposed command, even a rejected one, leaves its answer in the dedupe table and
    # so changes the content digest; read barriers write nothing.
    before = cluster.converged()
    for request, field in [
        (pb.RegisterRequest(request_id="r", group="g", agent_id="bad id"), "agent_id"),
        (pb.RegisterRequest(request_id="", group="g", agent_id="a"), "request_id"),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            client.call("AgentService", "Register", request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="x", spec=pb.GroupSpec(group="h", mode=99)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.mode" in info.value.details()
    assert cluster.converged() == before


def test_follower_redirects_to_leader(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n.index != leader.index)
    wait_for(lambda: node_status(follower.grpc).leader == leader.raft, "the follower to know the leader")
    with grpc.insecure_channel(follower.grpc) as channel:
        from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.AdminServiceStub(channel).CreateGroup(
                pb.CreateGroupRequest(request_id="f", spec=pb.GroupSpec(group="g")), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dict(info.value.trailing_metadata())["raftpoint-leader"] == leader.grpc


def test_restart_after_compaction_restores_from_our_snapshot(tmp_path: Path) -> None:
    settings = {**FAST, "compaction_min_entries": 50, "compaction_min_time": 0.5}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        client = Client(cluster)
        client.create_group()
        client.register("a")
        follower = next(n for n in cluster.nodes if n.index != cluster.leader().index)
        cluster.kill(follower.index)
        writes = 200
        for i in range(1, writes + 1):
            client.commit("a", i)
        leader = cluster.leader()
        wait_for(lambda: node_status(leader.grpc).last_snapshot_index > 100, "the leader to compact")
        assert node_status(leader.grpc).log_entries < writes
        cluster.start(follower.index)
        digest = cluster.converged(60)
        assert node_status(follower.grpc).content_digest == digest
        snapshot = follower.data_dir / "raft.snapshot"
        with open(snapshot, "rb") as f:
            assert snapshot_file.read_header(f).applied_index > 100
        assert node_status(follower.grpc).log_entries < writes
        assert client.checkpoints() == list(range(1, writes + 1))
