"""Connection: leader redirects, retries with the same request id, clear errors.

A fake follower (a real gRPC server on loopback) answers UNAVAILABLE with the
`raftpoint-leader` trailer pointing at an in-process coordinator; optionally it first
forwards the request, so the write applied although the client saw an error -- the
"unknown outcome" a leader change produces.
"""
from __future__ import annotations

import asyncio
from concurrent import futures
from typing import Iterator

import grpc
import pytest

from agent_client.connection import AsyncConnection, Connection, CoordinatorUnavailable, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.harness.local_cluster import free_ports


class FakeFollower(pb_grpc.AdminServiceServicer, pb_grpc.AgentServiceServicer):
    def __init__(self, leader: str, tls: ClientTLS, forward_first: bool) -> None:
        self.leader, self.tls, self.forward_first = leader, tls, forward_first
        self.calls = 0

    def _redirect(self, service: str, method: str, request, context):
        self.calls += 1
        if self.forward_first and self.calls == 1:
            with self.tls.channel(self.leader) as channel:
                stub = getattr(pb_grpc, f"{service}Stub")(channel)
                getattr(stub, method)(request, timeout=5)  # applied...
        context.set_trailing_metadata((("raftpoint-leader", self.leader),))
        context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")  # ...but the client sees an error

    def CreateGroup(self, request, context):
        self._redirect("AdminService", "CreateGroup", request, context)

    def Register(self, request, context):
        self._redirect("AgentService", "Register", request, context)


@pytest.fixture
def coordinator() -> Iterator[InProcessCoordinator]:
    with InProcessCoordinator() as c:
        yield c


def follower(leader: InProcessCoordinator, forward_first: bool = False) -> tuple[grpc.Server, str, FakeFollower]:
    """A follower that redirects to `leader`, with a certificate of the leader's CA."""
    server = grpc.server(futures.ThreadPoolExecutor(4))
    servicer = FakeFollower(leader.address, leader.client_tls(), forward_first)
    pb_grpc.add_AdminServiceServicer_to_server(servicer, server)
    pb_grpc.add_AgentServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    issued = leader.ca.server("fake-follower")
    server.add_secure_port(address, grpc.ssl_server_credentials([(issued.key_file.read_bytes(),
                                                                   issued.cert_file.read_bytes())]))
    server.start()
    return server, address, servicer


def create(rid: str, group: str = "g", mode: int = pb.CIC_BCS) -> pb.CreateGroupRequest:
    return pb.CreateGroupRequest(request_id=rid, spec=pb.GroupSpec(group=group, mode=mode, lease_ttl_s=60))


def test_follows_the_leader_named_by_a_follower(coordinator: InProcessCoordinator) -> None:
    server, address, fake = follower(coordinator)
    try:
        with Connection([address], tls=coordinator.client_tls()) as conn:
            resp = conn.call("AdminService", "CreateGroup", create("cg-1"))
            assert resp.group.spec.group == "g" and conn.target == coordinator.address and fake.calls == 1
    finally:
        server.stop(None)


def test_a_retried_write_is_applied_once(coordinator: InProcessCoordinator) -> None:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", create("cg-once"))
    server, address, fake = follower(coordinator, forward_first=True)
    try:
        with Connection([address], tls=coordinator.client_tls()) as conn:
            register = pb.RegisterRequest(secret=b"s" * 16, request_id="reg-once", group="g", agent_id="a")
            # the forwarded attempt registered the agent; the retry (same id) must not
            # register it again, which would count as a crash and bump the incarnation
            assert conn.call("AgentService", "Register", register).incarnation == 1 and fake.calls == 1
            again = pb.RegisterRequest(secret=b"s" * 16, request_id="reg-new", group="g", agent_id="a")
            assert conn.call("AgentService", "Register", again).incarnation == 2  # a new id is a new write
    finally:
        server.stop(None)


def test_rejections_are_not_retried_and_dead_endpoints_time_out(coordinator: InProcessCoordinator) -> None:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        with pytest.raises(Rejected) as info:
            conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r", group="nope", agent_id="a"))
        assert info.value.code == grpc.StatusCode.NOT_FOUND
    with Connection([f"127.0.0.1:{free_ports(1)[0]}"], deadline=0.5, rpc_timeout=0.2) as conn:
        with pytest.raises(CoordinatorUnavailable, match="no leader answered: UNAVAILABLE: ") as down:
            conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest())
    assert "\n" not in str(down.value) and "debug_error_string" not in str(down.value), str(down.value)


def test_a_service_stub_is_built_once_per_node_not_per_call(coordinator: InProcessCoordinator,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[grpc.Channel] = []
    stub = pb_grpc.AdminServiceStub
    monkeypatch.setattr(pb_grpc, "AdminServiceStub", lambda channel: built.append(channel) or stub(channel))
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        for _ in range(3):
            conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest())
    assert len(built) == 1, f"{len(built)} AdminService stubs built for 3 calls to one node"


def test_async_connection_follows_the_leader(coordinator: InProcessCoordinator) -> None:
    server, address, _ = follower(coordinator)

    async def main() -> pb.CreateGroupResponse:
        async with AsyncConnection([address], tls=coordinator.client_tls()) as conn:
            return await conn.call("AdminService", "CreateGroup", create("cg-async", group="ga"))

    try:
        assert asyncio.run(main()).group.spec.group == "ga"
    finally:
        server.stop(None)


@pytest.mark.cluster
def test_real_follower_redirects_to_the_real_leader(cluster) -> None:
    leader = cluster.leader()
    followers = [n.grpc for n in cluster.nodes if n.index != leader.index]
    with Connection(followers[:1], token=cluster.token, tls=cluster.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", create("cg-real"))
        assert conn.target == leader.grpc
