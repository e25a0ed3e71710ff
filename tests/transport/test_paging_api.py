"""ListCheckpoints and GetGroup answer in pages that together hold everything once."""
from __future__ import annotations

import grpc
import pytest

from agent_client.connection import Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb


def test_list_checkpoints_and_get_group_page_through_everything() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=600, retention=10)))
        expected = set()
        for agent in ("a", "b", "c"):
            inc = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, 
                request_id=f"r-{agent}", group="g", agent_id=agent)).incarnation
            for index in (1, 2):
                conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                    request_id=f"cp-{agent}-{index}", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc),
                    checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                                                 blob_uri=f"file:///b/{agent}/{index}", sha256="c" * 64, size=1)))
                expected.add((agent, index))

        seen, token, pages = [], "", 0
        while True:
            answer = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
                group="g", page_size=4, page_token=token))
            seen += [(c.agent_id, c.index) for c in answer.checkpoints]
            pages += 1
            token = answer.next_page_token
            if not token:
                break
        assert pages == 2 and seen == sorted(expected)
        everything = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g"))
        assert len(everything.checkpoints) == 6 and not everything.next_page_token

        first = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g", page_size=2))
        second = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(
            group="g", page_size=2, page_token=first.next_page_token))
        assert [a.agent_id for a in first.agents] == ["a", "b"] and [a.agent_id for a in second.agents] == ["c"]
        assert not second.next_page_token and second.group.spec.group == "g"

        with pytest.raises(Rejected) as info:
            conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", page_size=5000))
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and info.value.reason.startswith("page_size")
