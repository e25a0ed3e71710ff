"""AgentClient against a real 3-node cluster."""
from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agent_client.agent import AgentClient
from agent_client.connection import Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.cli.local_cluster import LocalCluster
from tests.support.cluster import Client

pytestmark = pytest.mark.cluster


def agent(cluster: LocalCluster, tmp_path: Path, name: str, state: dict, **kw) -> AgentClient:
    kw.setdefault("background", False)  # these tests carry out orders by hand
    client = AgentClient("g", name, cluster.endpoints(), tmp_path / "blobs",
                         snapshot=lambda: repr(sorted(state.items())).encode(), **kw)
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
    a.checkpoint(b"precious state" * 1000)
    for chunk in (tmp_path / "blobs" / "chunks").rglob("*"):
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
