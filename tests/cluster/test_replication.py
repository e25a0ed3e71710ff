"""Guarantees that leave the cluster intact, on one shared 3-process cluster:
replication, dedupe by request id, rejections that change nothing, redirects, bad input."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import LocalCluster, credentials_for, wait_for
from tests.support.cluster import Client

pytestmark = pytest.mark.cluster


def test_one_leader_and_writes_replicate_to_every_node(shared_cluster: LocalCluster, shared_client: Client) -> None:
    client = shared_client
    client.create_group("rep")
    client.register("rep-a", group="rep")
    for i in range(1, 11):
        client.commit("rep-a", i, group="rep")
    statuses = agreeing_statuses(shared_cluster)
    assert len(statuses) == 3 and sum(s.role == "leader" for s in statuses.values()) == 1
    assert client.checkpoints("rep") == list(range(1, 11))


def agreeing_statuses(cluster: LocalCluster) -> dict[int, pb.NodeStatus]:
    """One read of every node's status in which all stand at one applied index with one
    content and one state digest. The shared cluster moves on its own (earlier tests'
    agents are declared failed as their leases run out), so checks use one read, not
    a wait followed by another read."""
    def agree() -> dict[int, pb.NodeStatus] | None:
        st = shared = cluster.statuses()
        same = lambda field: len({getattr(s, field) for s in st.values()}) == 1  # noqa: E731
        return shared if len(st) == 3 and same("applied_index") and same("digest_index") \
            and same("content_digest") and same("state_digest") else None
    return wait_for(agree, "every node at one applied index with one content and state digest")


def test_duplicated_request_id_is_applied_once(shared_cluster: LocalCluster, shared_client: Client) -> None:
    client = shared_client
    client.create_group("dup")
    client.register("dup-a", group="dup")
    first = client.register("dup-b", group="dup", rid="same-id")
    second = client.register("dup-b", group="dup", rid="same-id")  # a retry: answered, not a second registration
    assert first == second and first.incarnation == 1
    assert client.register("dup-b", group="dup", rid="other-id").incarnation == 2  # a new request registers again
    one = client.commit("dup-a", 1, group="dup", rid="cp-dup")
    assert client.commit("dup-a", 1, group="dup", rid="cp-dup") == one
    assert client.checkpoints("dup", agent="dup-a") == [1]


def test_rejected_command_leaves_state_byte_identical(shared_cluster: LocalCluster, shared_client: Client) -> None:
    client = shared_client
    client.create_group("rej")
    client.register("rej-a", group="rej")
    windows = []
    for attempt in range(ATTEMPTS):  # until no other write lands between the two reads
        before = next(iter(agreeing_statuses(shared_cluster).values()))
        with pytest.raises(grpc.RpcError) as info:  # stale fencing token: rejected inside the state machine
            client.commit("rej-a", 1, incarnation=7, group="rej", rid=f"rej-stale-{attempt}")
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "token.incarnation" in info.value.details()
        after = next(iter(agreeing_statuses(shared_cluster).values()))
        windows.append(after.applied_index - before.applied_index)
        if after.applied_index == before.applied_index + 1:  # the rejected entry alone was applied
            assert after.state_digest == before.state_digest
            return
    pytest.fail(f"other writes landed in every window (entries applied per window: {windows})")


ATTEMPTS = 5


def test_invalid_input_is_named_and_never_proposed(shared_cluster: LocalCluster, shared_client: Client) -> None:
    client = shared_client
    client.create_group("inv")
    # A proposed command, even a rejected one, leaves its answer in the dedupe table and
    # so changes the content digest; read barriers write nothing.
    before = shared_cluster.converged()
    for request, field in [
        (pb.RegisterRequest(secret=b"s" * 16, request_id="r", group="inv", agent_id="bad id"), "agent_id"),
        (pb.RegisterRequest(secret=b"s" * 16, request_id="", group="inv", agent_id="a"), "request_id"),
        (pb.RegisterRequest(secret=b"s" * 16, request_id="bad id", group="inv", agent_id="a"), "request_id"),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            client.call("AgentService", "Register", request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        client.call("AdminService", "CreateGroup",
                    pb.CreateGroupRequest(request_id="x", spec=pb.GroupSpec(group="inv2", mode=99)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.mode" in info.value.details()
    assert shared_cluster.converged() == before


def test_follower_redirects_to_leader(shared_cluster: LocalCluster) -> None:
    leader = shared_cluster.leader()
    follower = next(n for n in shared_cluster.nodes if n.index != leader.index)
    wait_for(lambda: (s := follower.status()) is not None and s.leader == leader.raft,
             "the follower to know the leader")
    with follower.channel() as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.AdminServiceStub(channel).CreateGroup(
                pb.CreateGroupRequest(request_id="f", spec=pb.GroupSpec(group="fol")), timeout=5,
                metadata=credentials_for(follower.grpc))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dict(info.value.trailing_metadata())["raftpoint-leader"] == leader.grpc


def test_every_node_serves_health_and_reflection(shared_cluster: LocalCluster) -> None:
    def serving(address: str) -> bool:
        with shared_cluster.client_tls().channel(address) as channel:
            try:
                return health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service="raftpoint.v1.AgentService"), timeout=2
                ).status == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False

    for node in shared_cluster.nodes:
        wait_for(lambda: serving(node.grpc), f"node{node.index} to report SERVING")
    with shared_cluster.nodes[0].channel() as channel:
        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert {"raftpoint.v1.AgentService", "raftpoint.v1.AdminService", "grpc.health.v1.Health"} <= names
