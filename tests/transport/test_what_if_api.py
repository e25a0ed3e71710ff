"""WhatIf answers the recovery the coordinator would run if the named agent failed now.

Agents that still owe the acknowledgement of an earlier rollback order count as
failed in a recovery (they may already have rolled back); a what-if that left them
out would promise a smaller rollback than the one that then happens.
"""
from __future__ import annotations

import itertools

from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for


def test_what_if_matches_the_recovery_that_follows_while_an_agent_owes_an_ack() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        request_ids = itertools.count(1)

        def agent_call(method: str, request: object) -> object:
            return conn.call("AgentService", method, request)

        def register(agent: str) -> pb.RegisterResponse:
            return agent_call("Register", pb.RegisterRequest(secret=b"s" * 16, request_id=f"reg-{next(request_ids)}", group="g",
                                                             agent_id=agent))

        def commit(agent: str, index: int, incarnation: int) -> None:
            agent_call("CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"cp-{agent}-{index}", token=pb.FencingToken(secret=b"s" * 16, incarnation=incarnation),
                checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                                             blob_uri=f"file:///blobs/{agent}/{index}", sha256="c" * 64, size=1)))

        def report(receiver: str, record: pb.DependencyRecord) -> None:
            agent_call("ReportDependencies", pb.ReportDependenciesRequest(
                request_id=f"dep-{record.message_id}", group="g", agent_id=receiver,
                token=pb.FencingToken(secret=b"s" * 16, incarnation=1), records=[record]))

        def rollback_orders(agent: str, incarnation: int) -> list[pb.Order]:
            # Read again while empty: a window that closes before the stream's first read yields nothing.
            return wait_for(lambda: [o for o in conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
                group="g", agent_id=agent, token=pb.FencingToken(secret=b"s" * 16, incarnation=incarnation)), window=0.5)
                if o.WhichOneof("kind") == "roll_back"], f"{agent}'s rollback orders", 20)

        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        for agent in ("a", "b", "c"):
            register(agent)
            commit(agent, 1, 1)
        report("b", pb.DependencyRecord(sender="a", send_interval=2, receiver="b", receive_interval=2,
                                        message_id="m1", send_generation=1))
        # a restarts: b received a send a's rollback undoes, so b rolls back too.
        assert register("a").incarnation == 2
        [a_order] = rollback_orders("a", 2)
        [b_order] = rollback_orders("b", 1)
        assert {(t.agent_id, t.checkpoint_index) for t in a_order.roll_back.line} == {("a", 1), ("b", 1)}
        agent_call("AckOrder", pb.AckOrderRequest(request_id="ack-a", group="g", agent_id="a",
                                                  token=pb.FencingToken(secret=b"s" * 16, incarnation=2), order_id=a_order.order_id))
        commit("a", 2, 2)
        # b has not acknowledged yet; c receives what b sent in its new generation.
        report("c", pb.DependencyRecord(sender="b", send_interval=2, receiver="c", receive_interval=2,
                                        message_id="m2", send_generation=b_order.roll_back.generation))

        what_if = conn.call("AdminService", "WhatIf", pb.WhatIfRequest(group="g", failed=["a"])).targets
        again = register("a")  # a restarts again: the recovery the what-if described
        [order] = rollback_orders("a", again.incarnation)
        assert order.roll_back.recovery_id == again.recovery_id
        assert [(t.agent_id, t.checkpoint_index) for t in what_if] == \
            [(t.agent_id, t.checkpoint_index) for t in order.roll_back.line] == [("a", 2), ("b", 1), ("c", 1)]
