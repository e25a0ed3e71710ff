"""The leader's agent metrics, which the dashboard's "agents" panels and the bulk-failure
alert read: live agents by what keeps their lease, and agents declared failed."""
from __future__ import annotations

from prometheus_client import REGISTRY

from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_an_agent_whose_lease_runs_out_leaves_the_live_count_and_is_counted_declared_failed() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=1.0)))
        failed_before = sample("raftpoint_agents_declared_failed_total")
        conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r1", group="g",
                                                                 agent_id="a"))
        wait_for(lambda: sample("raftpoint_live_agents", lease="keepalive") == 1,
                 "the registered agent in raftpoint_live_agents{lease=keepalive}", 10)
        assert sample("raftpoint_live_agents", lease="session") == 0
        # No keepalive: after its TTL the leader declares it failed.
        wait_for(lambda: sample("raftpoint_agents_declared_failed_total") > failed_before,
                 "raftpoint_agents_declared_failed_total to count the agent", 15)
        declared = sample("raftpoint_agents_declared_failed_total") - failed_before
        assert declared == 1, f"{declared} agents counted declared failed, one was"
        wait_for(lambda: sample("raftpoint_live_agents", lease="keepalive") == 0,
                 "the failed agent to leave the live count", 10)
