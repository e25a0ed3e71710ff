"""A lagging node sheds work with RESOURCE_EXHAUSTED, REASON_OVERLOADED and a retry hint,
heartbeats last; the client waits the hint and retries; and the leader's failure
detector blames no agent for the time the leader itself lagged."""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

import grpc
import pytest

from agent_client.connection import Connection, overload_hint
from coordinator.api.metadata import REASON_METADATA_KEY, RETRY_AFTER_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.core.model import AgentState
from coordinator.harness.in_process import LocalReplica
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.observability import metrics
from coordinator.service import node_server

pytestmark = pytest.mark.slow


SECRET = b"s" * 16  # the agent secret Register takes and every agent write repeats
PLAIN = ClientTLS.plaintext()  # the node here is served without TLS: admission is under test


class LaggingReplica(LocalReplica):
    """A replica whose Raft tick lags, and that leads or not, as the test sets."""

    lag = 0.0
    leading = True

    def is_leader(self) -> bool:
        return self.leading

    def tick_lag_since(self, since: float) -> float:
        return self.lag


@pytest.fixture
async def node() -> AsyncIterator[tuple[LaggingReplica, str]]:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    replica, stop = LaggingReplica(address), asyncio.Event()
    serving = asyncio.create_task(node_server.serve(replica, address, stop))
    deadline = time.monotonic() + 10
    while await asyncio.to_thread(node_status, address, 1.0, PLAIN) is None:
        assert time.monotonic() < deadline and not serving.done(), "the server never answered"
        await asyncio.sleep(0.05)
    try:
        yield replica, address
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


async def lag(replica: LaggingReplica, seconds: float) -> None:
    """Set the lag and give admission's sampler (every 100 ms) time to see it."""
    replica.lag = seconds
    await asyncio.sleep(0.3)


def refusal(address: str, method: str, request) -> grpc.RpcError | None:
    with grpc.insecure_channel(address) as channel:
        try:
            getattr(pb_grpc.AgentServiceStub(channel), method)(request, timeout=5)
            return None
        except grpc.RpcError as err:
            return err


def set_up(address: str, lease_ttl_s: float) -> int:
    """A group and one registered agent "a"; its incarnation."""
    with Connection([address], deadline=10, tls=PLAIN) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=lease_ttl_s)))
        return conn.call("AgentService", "Register",
                         pb.RegisterRequest(request_id="r1", group="g", agent_id="a", secret=SECRET)
                         ).incarnation


def agent_state(replica: LocalReplica, agent: str) -> AgentState:
    found = replica.read_state().agent("g", agent)
    assert found is not None
    return found.state


async def test_work_is_shed_before_heartbeats_with_a_reason_and_a_retry_hint(node) -> None:
    replica, address = node
    incarnation = await asyncio.to_thread(set_up, address, 600)
    beat = pb.HeartbeatRequest(group="g", agent_id="a", token=pb.FencingToken(incarnation=incarnation, secret=SECRET))
    register = pb.RegisterRequest(request_id="r2", group="g", agent_id="b", secret=SECRET)
    shed_before = metrics.SHED.labels("write")._value.get()

    await lag(replica, 0.5)  # between the bounds: writes are shed, heartbeats served
    err = await asyncio.to_thread(refusal, address, "Register", register)
    assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(err.trailing_metadata())
    assert trailers[REASON_METADATA_KEY] == "REASON_OVERLOADED" and float(trailers[RETRY_AFTER_METADATA_KEY]) >= 0.2
    assert overload_hint(err) == float(trailers[RETRY_AFTER_METADATA_KEY])
    assert metrics.SHED.labels("write")._value.get() == shed_before + 1
    assert await asyncio.to_thread(refusal, address, "Heartbeat", beat) is None
    assert replica.read_state().agent("g", "b") is None  # nothing was proposed

    await lag(replica, 2.0)  # past the keepalive bound: heartbeats are shed too
    err = await asyncio.to_thread(refusal, address, "Heartbeat", beat)
    assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and overload_hint(err) >= 1.0

    # The client waits the hint and retries with the same request: it gets through once the lag is gone.
    with Connection([address], deadline=20, tls=PLAIN) as conn:
        call = asyncio.create_task(asyncio.to_thread(conn.call, "AgentService", "Register", register))
        await asyncio.sleep(0.5)
        assert not call.done()
        await lag(replica, 0.0)
        assert (await asyncio.wait_for(call, 15)).incarnation == 1


async def test_a_lagging_node_that_does_not_lead_redirects_instead_of_shedding(node) -> None:
    """A follower's lag must not keep a client from the leader: shed, the client would wait
    the hint and ask the same follower again; refused as not the leader, it goes on."""
    replica, address = node
    incarnation = await asyncio.to_thread(set_up, address, 600)
    beat = pb.HeartbeatRequest(group="g", agent_id="a", token=pb.FencingToken(incarnation=incarnation, secret=SECRET))
    shed_before = sum(metrics.SHED.labels(w)._value.get() for w in ("write", "keepalive"))
    replica.leading = False
    await lag(replica, 2.0)  # past both bounds: a leader would shed heartbeats and session opens

    err = await asyncio.to_thread(refusal, address, "Heartbeat", beat)
    assert err is not None and err.code() == grpc.StatusCode.UNAVAILABLE, err

    def open_session() -> grpc.RpcError:
        with grpc.insecure_channel(address) as channel:
            with pytest.raises(grpc.RpcError) as info:
                list(pb_grpc.AgentServiceStub(channel).Session(iter(()), timeout=5))
            return info.value
    err = await asyncio.to_thread(open_session)
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
    assert sum(metrics.SHED.labels(w)._value.get() for w in ("write", "keepalive")) == shed_before


LEASE_S = 1.5  # short, to keep the test short; long enough that the lag starts within it


async def test_no_agent_is_declared_failed_while_the_leader_lags(node) -> None:
    replica, address = node
    incarnation = await asyncio.to_thread(set_up, address, LEASE_S)
    credit_before = metrics.LEASE_CREDIT_SECONDS._value.get()
    # Lagging: the agent's heartbeats would be shed, so it sends none; the leader must not blame it.
    await lag(replica, 2.0)
    assert agent_state(replica, "a") is AgentState.ALIVE  # the lag began within the agent's lease
    await asyncio.sleep(3 * LEASE_S)  # three lease lifetimes of the leader's lag
    assert agent_state(replica, "a") is AgentState.ALIVE
    assert metrics.LEASE_CREDIT_SECONDS._value.get() > credit_before
    # Healthy again and still silent: now the silence is the agent's, and it is declared failed.
    await lag(replica, 0.0)
    deadline = time.monotonic() + 10
    while agent_state(replica, "a") is AgentState.ALIVE:
        assert time.monotonic() < deadline, "a silent agent was never declared failed after the lag ended"
        await asyncio.sleep(0.1)
    assert incarnation == 1


async def test_a_session_frame_is_shed_with_the_hint_and_the_agent_resends_it_after(node) -> None:
    import queue

    from agent_client.agent_stream import SessionStream, frame

    replica, address = node
    await asyncio.to_thread(set_up, address, 600)
    register = pb.RegisterRequest(request_id="r-s", group="g", agent_id="s", secret=SECRET)
    frames: queue.Queue[pb.AgentFrame | None] = queue.Queue()
    with grpc.insecure_channel(address) as channel:
        # Opened while the node keeps up (a new session is shed like a write); the frame comes later.
        replies = pb_grpc.AgentServiceStub(channel).Session(iter(frames.get, None), timeout=10)
        await asyncio.to_thread(grpc.channel_ready_future(channel).result, 5)
        await lag(replica, 0.5)
        frames.put(frame(1, "register", register))
        reply = await asyncio.to_thread(next, replies)
        frames.put(None)
    assert reply.correlation == 1 and reply.WhichOneof("body") == "status"
    assert reply.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert reply.status.reason == pb.REASON_OVERLOADED and reply.status.retry_after_s >= 0.2
    assert replica.read_state().agent("g", "s") is None  # nothing was proposed

    # The session client waits the hint and sends the same frame again: it gets in once the lag is gone.
    await lag(replica, 0.0)
    with Connection([address], deadline=20, tls=PLAIN) as conn:
        stream = SessionStream(conn, lambda order: None, lambda code, why: None)
        try:
            beat = pb.HeartbeatRequest(group="g", agent_id="a", token=pb.FencingToken(incarnation=1, secret=SECRET))
            await asyncio.to_thread(stream.call, "Heartbeat", beat)  # the session is open before the node lags
            await lag(replica, 0.5)
            call = asyncio.create_task(asyncio.to_thread(stream.call, "Register", register))
            await asyncio.sleep(0.5)
            assert not call.done()
            await lag(replica, 0.0)
            assert (await asyncio.wait_for(call, 15)).incarnation == 1
        finally:
            stream.close()


async def test_a_shed_session_open_is_tried_again_no_sooner_than_the_hint(node) -> None:
    """After a leader change every agent re-opens its session at once; a node that sheds
    those opens must not be asked again within the backoff's quarter second."""
    from agent_client.agent_stream import SessionStream

    replica, address = node
    await asyncio.to_thread(set_up, address, 600)
    register = pb.RegisterRequest(request_id="r-o", group="g", agent_id="o", secret=SECRET)
    await lag(replica, 0.5)  # opens are shed with a hint of twice the lag: 1 s
    shed_before = metrics.SHED.labels("write")._value.get()
    with Connection([address], deadline=30, tls=PLAIN) as conn:
        stream = SessionStream(conn, lambda order: None, lambda code, why: None)
        try:
            call = asyncio.create_task(asyncio.to_thread(stream.call, "Register", register))
            window = 3.0
            await asyncio.sleep(window)  # an observation window: how often the client came back in it
            opens = metrics.SHED.labels("write")._value.get() - shed_before
            # The backoff alone (at most 0.25 s) would have come back a dozen times or more.
            assert 1 <= opens <= window / 1.0 + 1, opens
            await lag(replica, 0.0)
            assert (await asyncio.wait_for(call, 15)).incarnation == 1
        finally:
            stream.close()
