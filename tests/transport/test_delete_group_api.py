"""DeleteGroup frees everything a finished group holds, and refuses a group whose agents still run."""
from __future__ import annotations

import grpc
import pytest

from agent_client.connection import Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb


def test_delete_group_frees_every_record_of_a_finished_group_and_only_then() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        empty = coordinator.replica.state_digest()
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.COORDINATED, lease_ttl_s=600)))
        inc = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, 
            request_id="r", group="g", agent_id="a")).incarnation
        conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e1", group="g"))
        conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id="cp", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc, epoch=1),
            checkpoint=pb.CheckpointMeta(group="g", agent_id="a", index=1, epoch=1, kind=pb.COORDINATED_CUT,
                                         blob_uri="file:///b/a/1", sha256="c" * 64, size=7)))

        with pytest.raises(Rejected) as info:
            conn.call("AdminService", "DeleteGroup", pb.DeleteGroupRequest(request_id="d1", group="g"))
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.reason_code == pb.REASON_GROUP_IN_USE
        assert conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).agents

        conn.call("AgentService", "Deregister", pb.DeregisterRequest(
            request_id="dr", group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc, epoch=1)))
        deleted = conn.call("AdminService", "DeleteGroup", pb.DeleteGroupRequest(request_id="d2", group="g"))
        assert list(deleted.deletable_blob_uris) == ["file:///b/a/1"] and deleted.bytes == 7
        assert coordinator.replica.state_digest() == empty, "records of the deleted group remain"
        with pytest.raises(Rejected) as info:
            conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g"))
        assert info.value.reason_code == pb.REASON_GROUP_NOT_FOUND
        # The name is free again, for another spec.
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg2", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS)))
