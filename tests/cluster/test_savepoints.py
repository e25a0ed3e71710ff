"""Savepoints on a real three-node cluster: garbage collection keeps what one holds and
collects the rest as before, and the savepoint outlives its leader."""
from __future__ import annotations

import grpc
import pytest

from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster
from tests.support.cluster import Client

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _gc(client: Client, rid: str) -> list[str]:
    return sorted(client.call("AdminService", "GarbageCollect",
                              pb.GarbageCollectRequest(request_id=rid, group="g")).deletable_blob_uris)


def _refusal(client: Client, method: str, request) -> str:
    with pytest.raises(grpc.RpcError) as refused:
        client.call("AdminService", method, request)
    return dict(refused.value.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")


def test_gc_keeps_a_savepoints_checkpoints_across_a_leader_kill(cluster: LocalCluster, client: Client) -> None:
    client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        group="g", mode=pb.UNCOORDINATED, retention=0, lease_ttl_s=3600.0)))
    for agent in ("a", "b"):
        client.register(agent)
    assert _refusal(client, "CreateSavepoint", pb.CreateSavepointRequest(request_id="sp-0", group="g", name="s")) \
        == "REASON_NO_CONSISTENT_CUT"
    for agent in ("a", "b"):
        client.commit(agent, 1)
        client.commit(agent, 2)
    create = pb.CreateSavepointRequest(request_id="sp-1", group="g", name="s", labels={"why": "before the upgrade"})
    created = client.call("AdminService", "CreateSavepoint", create).savepoint
    assert [(s.agent_id, s.index) for s in created.checkpoints] == [("a", 2), ("b", 2)]
    # A retry (same request id) is answered with the first answer, not refused as a duplicate name.
    assert client.call("AdminService", "CreateSavepoint", create).savepoint == created
    assert _refusal(client, "CreateSavepoint", pb.CreateSavepointRequest(request_id="sp-2", group="g", name="s")) \
        == "REASON_SAVEPOINT_EXISTS"
    for agent in ("a", "b"):
        for index in (3, 4):
            client.commit(agent, index)
    # Retention 0: the line is at 4, so 1 and 3 go as they did before savepoints; 2 stays for "s".
    assert _gc(client, "gc-1") == [f"file:///blobs/{a}/{i}" for a in ("a", "b") for i in (1, 3)]
    assert client.checkpoints() == [2, 4, 2, 4]

    cluster.kill(cluster.leader().index)
    cluster.leader()
    listed = client.call("AdminService", "ListSavepoints", pb.ListSavepointsRequest(group="g")).savepoints
    assert list(listed) == [created], listed
    for agent in ("a", "b"):
        client.commit(agent, 5)
    assert _gc(client, "gc-2") == ["file:///blobs/a/4", "file:///blobs/b/4"]
    assert client.checkpoints() == [2, 5, 2, 5]

    client.call("AdminService", "DeleteSavepoint", pb.DeleteSavepointRequest(request_id="del-1", group="g", name="s"))
    assert _refusal(client, "DeleteSavepoint", pb.DeleteSavepointRequest(request_id="del-2", group="g", name="s")) \
        == "REASON_SAVEPOINT_NOT_FOUND"
    assert _gc(client, "gc-3") == ["file:///blobs/a/2", "file:///blobs/b/2"]
