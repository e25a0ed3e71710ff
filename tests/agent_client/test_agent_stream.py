"""The agent's session stream (agent_stream.py): the clients' default transport."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from agent_client.agent import AgentClient
from agent_client.agent_stream import SessionStream, judge
from agent_client.aio import AsyncAgentClient
from agent_client.connection import Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import LEADER_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.support.cluster import Client


SECRET = b"s" * 16  # the agent secret Register takes and every agent write repeats

def _calls(method: str) -> float:
    return sum(REGISTRY.get_sample_value("raftpoint_rpc_seconds_count", {"method": method, "code": code}) or 0.0
               for code in ("OK", "CANCELLED", "UNAVAILABLE", "FAILED_PRECONDITION"))


def _group(coordinator: InProcessCoordinator, name: str) -> None:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"cg-{name}", spec=pb.GroupSpec(group=name, mode=pb.CIC_BCS, lease_ttl_s=600)))


def test_a_reply_is_judged_as_the_unary_status_would_be() -> None:
    ok = pb.CoordinatorFrame(correlation=1, heartbeat=pb.HeartbeatResponse(current_epoch=3))
    assert judge(ok, "heartbeat").current_epoch == 3
    refused = pb.CoordinatorFrame(correlation=1, status=pb.FrameStatus(
        code=grpc.StatusCode.FAILED_PRECONDITION.value[0], reason=pb.REASON_STALE_INCARNATION, message="stale"))
    with pytest.raises(Rejected) as info:
        judge(refused, "heartbeat")
    assert (info.value.code, info.value.reason_code, info.value.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION, pb.REASON_STALE_INCARNATION, "stale")


def test_the_client_talks_over_one_session_and_gets_its_rollback_pushed(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator:
        _group(coordinator, "s")
        unary_before = {m: _calls(m) for m in ("Register", "CommitCheckpoint", "Heartbeat", "WatchOrders")}
        state = {"n": 0}
        rolled: list[object] = []
        a = AgentClient("s", "a", [coordinator.address], tmp_path / "a", tls=coordinator.client_tls(), snapshot=lambda: dict(state),
                        on_rollback=lambda s, why: rolled.append(s), keepalive_interval=0.2)
        b = AgentClient("s", "b", [coordinator.address], tmp_path / "b", tls=coordinator.client_tls(), snapshot=lambda: {}, keepalive_interval=0.2)
        try:
            a.register()
            a.restore()
            a.checkpoint()
            b.register()
            b.restore()
            b.checkpoint()
            state["n"] = 1
            a.unwrap(b.wrap(b"hi", "a"))  # a now depends on b's interval 2
            b2 = AgentClient("s", "b", [coordinator.address], tmp_path / "b", tls=coordinator.client_tls(), snapshot=lambda: {},
                             background=False)
            b2.register()  # b "restarts": a must roll back to its checkpoint 1, pushed to it
            wait_for(lambda: a.rollbacks, "the rollback to be pushed to a", 10)
            assert a.rollbacks[0].index == 1 and rolled == [{"n": 0}]
            b2.close()
        finally:
            a.close()
            b.close()
        assert {m: _calls(m) for m in unary_before} == unary_before  # no unary agent call, no WatchOrders
        assert _calls("Session") >= 2


def test_the_unary_transport_stays_available(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator:
        _group(coordinator, "u")
        before = _calls("CommitCheckpoint")
        with AgentClient("u", "a", [coordinator.address], tmp_path, tls=coordinator.client_tls(), snapshot=lambda: {}, transport="unary") as a:
            a.register()
            a.restore()
            a.checkpoint()
            assert a.stream is None
        assert _calls("CommitCheckpoint") == before + 1
    with pytest.raises(ValueError):
        AgentClient("u", "a", ["127.0.0.1:1"], tmp_path, snapshot=lambda: {}, transport="carrier pigeon")


def test_the_async_client_commits_over_the_session(tmp_path: Path) -> None:
    async def run(coordinator: InProcessCoordinator) -> int:
        async with AsyncAgentClient("x", "a", [coordinator.address], tmp_path, snapshot=lambda: {"k": 1},
                                    tls=coordinator.client_tls()) as a:
            await a.register()
            await a.restore()
            index = await a.checkpoint()
            assert a.stream is not None
            await a.keepalive()
            return index

    with InProcessCoordinator() as coordinator:
        _group(coordinator, "x")
        before = _calls("CommitCheckpoint")
        assert asyncio.run(run(coordinator)) == 1
        assert _calls("CommitCheckpoint") == before


def test_a_fenced_watch_fences_the_client(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator:
        _group(coordinator, "f")
        zombie = AgentClient("f", "a", [coordinator.address], tmp_path / "z", tls=coordinator.client_tls(), snapshot=lambda: {},
                             keepalive_interval=60)  # only the pushed watch end can fence it in time
        try:
            zombie.register()
            with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
                conn.call("AgentService", "Register", pb.RegisterRequest(secret=SECRET, request_id="again", group="f", agent_id="a"))
            wait_for(lambda: zombie.fenced, "the zombie's watch to end fenced", 10)
            assert "stale incarnation" in zombie.fenced and zombie.rollbacks == []
        finally:
            zombie.close()


@pytest.mark.cluster
@pytest.mark.slow
def test_a_follower_refuses_the_open_and_writes_survive_a_leader_kill(tmp_path: Path) -> None:
    from tests.support.cluster import FAST

    with LocalCluster(tmp_path / "cluster", 3, settings=FAST).start_all() as cluster:
        leader = cluster.leader()
        follower = next(n for n in cluster.nodes if n is not leader)
        wait_for(lambda: (follower.status() or pb.NodeStatus()).leader == leader.raft,
                 "the follower to know the leader", 10)
        with cluster.client_tls().channel(follower.grpc) as channel:
            call = pb_grpc.AgentServiceStub(channel).Session(iter(()), timeout=5, metadata=cluster.credentials)
            with pytest.raises(grpc.RpcError) as info:
                list(call)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert dict(info.value.trailing_metadata() or ()).get(LEADER_METADATA_KEY) == leader.grpc

        client = Client(cluster)
        client.create_group("k")
        reg = client.register("a", group="k")
        token = pb.FencingToken(secret=SECRET, incarnation=reg.incarnation)
        conn = Connection([follower.grpc], deadline=30, token=cluster.token, tls=cluster.client_tls())  # starts at a follower: redirected
        stream = SessionStream(conn, lambda order: None, lambda code, why: None)
        answers: list[int] = []
        errors: list[BaseException] = []

        def commits() -> None:
            try:
                for i in range(1, 41):
                    resp = stream.call("CommitCheckpoint", pb.CommitCheckpointRequest(
                        request_id=f"k-cp-{i}", token=token, checkpoint=pb.CheckpointMeta(
                            group="k", agent_id="a", index=i, kind=pb.BASIC, blob_uri=f"file:///k/{i}",
                            sha256="c" * 64)))
                    answers.append(resp.checkpoint.index)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        worker = threading.Thread(target=commits)
        worker.start()
        try:
            wait_for(lambda: len(answers) >= 10, "commits before the kill", 20)
            cluster.kill(leader.index)
            worker.join(60)
        finally:
            stream.close()
            conn.close()
        assert not worker.is_alive() and errors == []
        assert answers == list(range(1, 41))  # every write answered once, in order, across the leader change
        assert client.checkpoints(group="k", agent="a") == list(range(1, 41))
