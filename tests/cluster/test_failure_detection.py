"""Lease expiry -> DeclareAgentFailed -> rollback orders -> acks -> RUNNING, across a leader kill."""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from chaos.linkfaults import DROP
from chaos.netproxy import NetProxy
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.api.metadata import bearer
from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.support.cluster import FAST

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


# Pings every 0.5 s, unanswered for 0.5 s: a vanished client is found within about a second.
PINGS = {**FAST, "session_ping_s": 0.5, "session_ping_timeout_s": 0.5}
HOLD_TTL_S = 2.0


def _agent_state(conn: Connection, group: str, agent: str) -> int:
    resp = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=group))
    return next(a.state for a in resp.agents if a.agent_id == agent)


def _one_attempt(cluster: LocalCluster, proxy: NetProxy, attempt: int) -> bool:
    """False when leadership moved while it ran (the session went with the old leader)."""
    conn = Connection(cluster.endpoints(), deadline=20, token=cluster.token, tls=cluster.client_tls())
    group = f"hold{attempt}"
    conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
        group=group, mode=pb.CIC_BCS, lease_ttl_s=HOLD_TTL_S)))
    leader = cluster.leader()
    term = leader.status().term
    link = f"to-leader-{attempt}"
    # The session reaches the leader through a link that can go silent; it is a raw
    # stream, which follows no redirect, so it stays on that link.
    channel = cluster.client_tls().channel(proxy.add_link(link, leader.grpc))
    out: queue.SimpleQueue[pb.AgentFrame | None] = queue.SimpleQueue()
    metadata = bearer(cluster.token) if cluster.token else None
    call = pb_grpc.AgentServiceStub(channel).Session(iter(out.get, None), metadata=metadata)
    replies: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read() -> None:
        try:
            for reply in call:
                replies.put(reply)
        except grpc.RpcError as err:  # the link went silent, or the test ended the call
            replies.put(err)

    threading.Thread(target=read, daemon=True).start()
    try:
        out.put(pb.AgentFrame(correlation=1, register=pb.RegisterRequest(
            secret=b"s" * 16, request_id=f"r-{group}-held", group=group, agent_id="held")))
        reg = replies.get(timeout=20)
        if isinstance(reg, grpc.RpcError) and cluster.leader().status().term != term:
            return False  # the node stopped leading before it answered
        assert isinstance(reg, pb.CoordinatorFrame) and reg.WhichOneof("body") == "register", reg
        # The same TTL, registered after: "quiet" sends nothing at all, not even a keepalive.
        conn.call("AgentService", "Register", pb.RegisterRequest(
            secret=b"s" * 16, request_id=f"r-{group}-quiet", group=group, agent_id="quiet"))
        wait_for(lambda: _agent_state(conn, group, "quiet") == pb.AGENT_FAILED,
                 "the silent agent's lease to run out", 30, 0.1)
        # held's lease, renewed no later than quiet's, ran out no later: only the session holds it.
        held_then = _agent_state(conn, group, "held")
        if cluster.leader().status().term != term:
            return False
        assert held_then == pb.AGENT_ALIVE, "an open session did not hold its agent's lease"
        silent_from = time.monotonic()
        proxy.update(link, up=DROP, down=DROP)  # the agent's host vanishes: nothing closes its connection
        wait_for(lambda: _agent_state(conn, group, "held") == pb.AGENT_FAILED,
                 "the vanished session's agent to be declared failed", 30, 0.1)
        if cluster.leader().status().term != term:
            return False
        # Not before a whole TTL after the session ended (the pings had to go unanswered first).
        assert time.monotonic() - silent_from >= HOLD_TTL_S
        return True
    finally:
        out.put(None)
        call.cancel()
        channel.close()


@pytest.mark.slow
def test_an_open_session_holds_its_lease_until_its_client_vanishes(tmp_path: Path) -> None:
    """The session's own liveness (the node's HTTP/2 pings) keeps its agent's lease: an agent
    that sends no keepalive but keeps its session is not declared failed when one with no
    session is, and is declared failed once its client stops answering the pings."""
    proxy = NetProxy()
    try:
        with LocalCluster(tmp_path / "cluster", 3, settings=PINGS).start_all() as cluster:
            cluster.leader()
            assert any(_one_attempt(cluster, proxy, attempt) for attempt in range(3)), \
                "leadership moved in every attempt"
    finally:
        proxy.close()
