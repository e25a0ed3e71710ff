"""Register tells a re-registering agent which recovery it started, so a client (and the
chaos checker) can tie the rollback orders it then receives to that registration."""
from __future__ import annotations

from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for


def test_register_answers_the_recovery_a_re_registration_started() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=600)))

        def register(rid: str, agent: str) -> pb.RegisterResponse:
            return conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id=rid, group="g", agent_id=agent))

        first = register("r1", "a")
        assert (first.incarnation, first.recovery_id) == (1, 0)  # a new agent starts no recovery
        assert register("r2", "b").recovery_id == 0
        again = register("r3", "a")
        assert (again.incarnation, again.recovery_id) == (2, 1)
        # A window that closes before the stream's first read (a slow start) yields nothing: read again.
        orders = wait_for(lambda: conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=2)), window=0.5),
            "a's rollback order", 20)
        assert [o.roll_back.recovery_id for o in orders] == [1]
        assert register("r3", "a") == again  # a retry is answered with the first result
