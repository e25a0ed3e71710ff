"""Coordinated epochs on a real cluster: commit to stable, deadline abort, timer-driven start."""
from __future__ import annotations

import grpc
import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.support.cluster import Client

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def commit(client: Client, agent: str, index: int, epoch: int):
    return client.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
        request_id=f"cp-{agent}-{index}-{epoch}", token=pb.FencingToken(secret=b"s" * 16, incarnation=1, epoch=epoch),
        checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, epoch=epoch, kind=pb.COORDINATED_CUT,
                                     blob_uri=f"file:///b/{agent}/{index}", sha256="f" * 64, size=1)))


def group(client: Client) -> pb.GetGroupResponse:
    return client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g"))


def test_missed_deadline_aborts_and_the_next_epoch_starts(cluster: LocalCluster, client: Client) -> None:
    client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        # Long enough for epoch 1's two commits on a loaded machine, short enough to wait out for epoch 2.
        group="g", mode=pb.COORDINATED, lease_ttl_s=3600, epoch_timeout_s=4.0)))
    client.register("a")
    client.register("b")
    epoch = client.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e1", group="g")).epoch
    commit(client, "a", 1, epoch.epoch)
    commit(client, "b", 1, epoch.epoch)
    assert group(client).group.stable_epoch == 1
    client.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e2", group="g"))
    commit(client, "a", 2, 2)  # b never commits epoch 2
    aborted = wait_for(lambda: next((e for e in group(client).recent_epochs
                                     if e.epoch == 2 and e.state == pb.EPOCH_ABORTED), None), "the deadline abort", 30)
    assert "deadline" in aborted.reason
    assert group(client).group.stable_epoch == 1  # the previous stable epoch stays the recovery line
    with pytest.raises(grpc.RpcError) as info:
        commit(client, "b", 2, 2)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "checkpoint.epoch" in info.value.details()
    assert client.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e3", group="g")).epoch.epoch == 3


def test_epochs_start_on_the_group_interval(cluster: LocalCluster, client: Client) -> None:
    client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        group="g", mode=pb.COORDINATED, lease_ttl_s=3600, checkpoint_interval_s=0.5, epoch_timeout_s=0.5)))
    client.register("a")
    # Nobody commits: each epoch starts on the timer, misses its deadline and is aborted.
    wait_for(lambda: group(client).group.current_epoch >= 2, "two timer-driven epochs", 20)
    states = {e.epoch: e.state for e in group(client).recent_epochs}
    assert states[1] == pb.EPOCH_ABORTED
