"""A replaced (zombie) incarnation never receives its replacement's rollback orders.

If it did, it would carry the order out: restore, take the order's generation, and the
messages it sends afterwards would no longer be recognised as undone by the rollback's
fence (the chaos agent workload found tokens created that way).
"""
from __future__ import annotations

import threading
from pathlib import Path

import grpc

from agent_client.agent import AgentClient
from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for


def _group(conn: Connection, group: str) -> None:
    conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
        request_id=f"cg-{group}", spec=pb.GroupSpec(group=group, mode=pb.CIC_BCS, lease_ttl_s=600)))


def test_an_open_order_stream_of_a_replaced_incarnation_ends_without_the_new_order() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        _group(conn, "g")
        first = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r1", group="g", agent_id="a"))
        call, items = conn.stream("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=first.incarnation)), timeout=10)
        seen: list[object] = []
        ended: list[grpc.RpcError] = []

        def watch() -> None:
            try:
                seen.extend(items)
            except grpc.RpcError as err:
                ended.append(err)

        watcher = threading.Thread(target=watch)
        watcher.start()
        again = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r2", group="g", agent_id="a"))
        watcher.join(5)
        call.cancel()
        assert not watcher.is_alive() and seen == []
        assert ended and ended[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "stale incarnation 1" in ended[0].details()
        orders = wait_for(lambda: conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=again.incarnation)), window=0.5),
            "the live incarnation's rollback order", 20)
        assert [o.roll_back.recovery_id for o in orders] == [again.recovery_id]  # the live incarnation gets it


def test_a_zombie_client_is_fenced_and_obeys_nothing(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator:
        def client(blobs: str) -> AgentClient:
            return AgentClient("g", "a", [coordinator.address], tmp_path / blobs, snapshot=lambda: {"n": 1},
                               tls=coordinator.client_tls(),
                               keepalive_interval=60)  # only the order stream can fence it in time
        with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
            _group(conn, "g")
        zombie = client("zombie")
        try:
            zombie.register()
            zombie.restore()
            zombie.checkpoint()
            generation = zombie.generation
            with client("replacement") as replacement:
                replacement.register()
                wait_for(lambda: zombie.fenced, "the zombie's order stream to be refused", 10)
                assert "stale incarnation" in zombie.fenced
                assert zombie.rollbacks == [] and zombie.generation == generation
                assert replacement.restore().index == 1
        finally:
            zombie.close()
