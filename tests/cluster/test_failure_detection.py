"""Lease expiry -> DeclareAgentFailed -> rollback orders -> acks -> RUNNING, across a leader kill."""
from __future__ import annotations

import threading

import pytest

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, wait_for

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_expired_lease_rolls_back_dependents_across_leader_kill(cluster: LocalCluster) -> None:
    conn = Connection(cluster.endpoints(), deadline=20, token=cluster.token, tls=cluster.client_tls())
    conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        # b's heartbeat retries through the failover well within its lease; a's silence ends it.
        group="g", mode=pb.CIC_BCS, lease_ttl_s=4.0)))
    a = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="ra", group="g", agent_id="a"))
    b = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="rb", group="g", agent_id="b"))
    stop = threading.Event()

    def heartbeat_b() -> None:  # b stays alive; a goes silent
        while not stop.wait(0.3):
            try:
                conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(
                    group="g", agent_id="b", token=pb.FencingToken(secret=b"s" * 16, incarnation=b.incarnation)), deadline=1.5)
            except (CoordinatorUnavailable, Rejected):
                pass

    beats = threading.Thread(target=heartbeat_b, daemon=True)
    beats.start()
    try:
        def commit(agent: str, inc: int, index: int) -> None:
            conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"c-{agent}-{index}", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc),
                checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                                             blob_uri=f"file:///b/{agent}/{index}", sha256="d" * 64, size=1)))

        commit("a", a.incarnation, 1)
        # b received a message a sent after a's checkpoint 1, then checkpointed.
        conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
            request_id="deps", group="g", agent_id="b", token=pb.FencingToken(secret=b"s" * 16, incarnation=b.incarnation),
            records=[pb.DependencyRecord(sender="a", send_interval=2, receiver="b", receive_interval=1, message_id="m1")]))
        commit("b", b.incarnation, 1)
        cluster.kill(cluster.leader().index)

        def recovering() -> bool:
            group = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g"))
            return group.group.state == pb.RECOVERING
        wait_for(recovering, "a's lease to expire on the new leader", 30, 0.2)

        orders = wait_for(lambda: conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="b", token=pb.FencingToken(secret=b"s" * 16, incarnation=b.incarnation)), window=0.5),
            "b's rollback order", 20)
        [order] = orders
        assert order.roll_back.checkpoint_index == 0  # b's checkpoint 1 holds an orphan receive
        again = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="ra2", group="g", agent_id="a"))
        assert again.incarnation == a.incarnation + 1 and again.resume_from.index == 1
        [a_order] = wait_for(lambda: conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=again.incarnation)), window=0.5),
            "a's rollback order", 20)
        for agent, inc, o in (("b", b.incarnation, order), ("a", again.incarnation, a_order)):
            conn.call("AgentService", "AckOrder", pb.AckOrderRequest(
                request_id=f"ack-{agent}", group="g", agent_id=agent, token=pb.FencingToken(secret=b"s" * 16, incarnation=inc),
                order_id=o.order_id))
        group = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group
        assert group.state == pb.RUNNING
        listed = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g"))
        assert [(c.agent_id, c.index) for c in listed.checkpoints] == [("a", 1)]
    finally:
        stop.set()
        beats.join(5)
        conn.close()
