"""AgentClient against a real 3-node cluster."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agent_client.agent import AgentClient
from agent_client.aio import AsyncAgentClient
from agent_client.connection import Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster
from tests.support.cluster import Client

pytestmark = pytest.mark.cluster


OPEN: list[AgentClient] = []


@pytest.fixture(autouse=True)
def close_agents() -> Iterator[None]:
    """Each test's clients are closed after it: their session threads would go on
    reconnecting to a cluster that is gone."""
    yield
    while OPEN:
        OPEN.pop().close()


def agent(cluster: LocalCluster, tmp_path: Path, name: str, state: dict, **kw) -> AgentClient:
    kw.setdefault("background", False)  # these tests carry out orders by hand
    client = AgentClient("g", name, cluster.endpoints(), tmp_path / "blobs", token=cluster.token, tls=cluster.client_tls(),
                         snapshot=lambda: repr(sorted(state.items())).encode(), **kw)
    OPEN.append(client)
    client.register()
    return client


def test_bcs_forces_before_delivery_and_delivers_once(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    client.create_group(mode=pb.CIC_BCS)
    a = agent(cluster, tmp_path, "a", {"x": 1})
    b = agent(cluster, tmp_path, "b", {"y": 1})
    a.checkpoint()
    a.checkpoint()
    envelope = a.wrap(b"hello", to="b")
    assert b.unwrap(envelope) == b"hello"
    assert b.forced == 1 and b.last_index == 2  # forced to the sender's index before delivery
    assert b.unwrap(envelope) is None  # a duplicate is delivered once
    kinds = {(c.agent_id, c.index): c.kind for c in
             client.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g")).checkpoints}
    assert kinds[("b", 2)] == pb.FORCED


def test_zombie_incarnation_is_rejected(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    client.create_group(mode=pb.CIC_HMNR)
    old = agent(cluster, tmp_path, "a", {}, members=["a"])
    agent(cluster, tmp_path, "a", {}, members=["a"])  # the restarted agent
    with pytest.raises(Rejected) as info:
        old.checkpoint(b"stale")
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION and "incarnation" in info.value.reason


def test_corrupted_blob_is_rejected_with_a_reason(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    client.create_group(mode=pb.UNCOORDINATED)
    a = agent(cluster, tmp_path, "a", {"x": 1})
    a.checkpoint(b"precious state" * 5000)  # past the manifest's inline room: its chunks are in a pack
    for chunk in (tmp_path / "blobs" / "packs").rglob("*"):
        if chunk.is_file():
            chunk.write_bytes(b"garbage")
    restarted = agent(cluster, tmp_path, "a", {})
    [order] = restarted.pending_orders()
    restored = restarted.obey(order)
    assert restored.state is None and restored.reason.startswith("rejected:") and "chunk" in restored.reason


def test_rollback_order_restores_the_dependent_agent(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    client.create_group(mode=pb.CIC_BCS)
    a = agent(cluster, tmp_path, "a", {"x": 1})
    b = agent(cluster, tmp_path, "b", {"y": 1})
    b.checkpoint(b"b at 1")
    a.checkpoint(b"a at 1")
    assert b.unwrap(a.wrap(b"after a's checkpoint", to="b"))  # b's interval 2 depends on a's interval 2
    b.checkpoint(b"b at 2 with the message")
    restarted = agent(cluster, tmp_path, "a", {})  # a crashed: its interval 2 is lost
    assert restarted.restore().state == b"a at 1"
    [order] = b.pending_orders()
    restored = b.obey(order)
    assert restored.index == 1 and restored.state == b"b at 1" and "rollback order" in restored.reason
    [a_order] = restarted.pending_orders()
    restarted.obey(a_order)
    group = client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group
    assert group.state == pb.RUNNING


def test_an_orphan_is_refused_by_the_cluster_and_not_delivered(cluster: LocalCluster, client: Client,
                                                               tmp_path: Path) -> None:
    client.create_group(mode=pb.CIC_BCS)
    a = agent(cluster, tmp_path, "a", {"x": 1})
    b = agent(cluster, tmp_path, "b", {"y": 1})
    a.checkpoint(b"a at 1")
    in_flight = a.wrap(b"sent after a's checkpoint", to="b")
    restarted = agent(cluster, tmp_path, "a", {})  # a crashed: its interval 2 of generation 1 is undone
    assert restarted.restore().index == 1 and restarted.generation > a.generation
    restarted.sync_orders()
    assert b.unwrap(in_flight) is None and b.orphans == 1
    with pytest.raises(grpc.RpcError) as info:  # the refusal itself, as any client sees it
        client.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
            request_id="deps-orphan", group="g", agent_id="b",
            token=pb.FencingToken(secret=b.core.secret, incarnation=b.incarnation),  # as b itself
            records=[pb.DependencyRecord(sender="a", send_interval=2, receiver="b", receive_interval=1,
                                         message_id="a.1.7", send_generation=a.generation)]))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details().startswith("records[0]: orphan message 'a.1.7'")
    fresh = restarted.wrap(b"the new generation", to="b")
    assert b.unwrap(fresh) == b"the new generation"


def test_async_client_on_a_cluster_redelivers_after_a_restart(cluster: LocalCluster, client: Client,
                                                              tmp_path: Path) -> None:
    client.create_group(mode=pb.CIC_HMNR)
    members = ["a", "b"]

    async def main() -> tuple[int, int, list[str]]:
        tokens = {"a": 10, "b": 10}

        def make(name: str) -> AsyncAgentClient:
            def redeliver(payload: bytes, sender: str) -> None:
                tokens[name] += int(payload)
            return AsyncAgentClient("g", name, cluster.endpoints(), tmp_path / "blobs", members=members,
                                    token=cluster.token, tls=cluster.client_tls(),
                                    snapshot=lambda: {"tokens": tokens[name]}, on_redeliver=redeliver)

        async with make("a") as a, make("b") as b:
            await a.register()
            await b.register()
            await b.checkpoint()
            for amount in (1, 2, 3):
                tokens["a"] -= amount
                tokens["b"] += int(await b.unwrap(a.wrap(str(amount).encode(), to="b")))
            async with make("b") as again:  # b crashed after receiving: a keeps running
                await again.register()
                async with again.atomic():
                    tokens["b"] = (await again.restore()).state["tokens"]
                    await again.sync_orders()
                return tokens["a"], tokens["b"], [m.split(".")[0] for m, _ in again.redelivered]

    a_tokens, b_tokens, redelivered_from = asyncio.run(main())
    assert (a_tokens, b_tokens, redelivered_from) == (4, 16, ["a", "a", "a"])
