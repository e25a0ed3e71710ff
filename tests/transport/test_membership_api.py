"""AddNode/RemoveNode refusals that need no cluster: a bad address, and a coordinator
without Raft membership (the in-process one)."""
from __future__ import annotations

import grpc
import pytest

from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc


@pytest.mark.parametrize("method", ["AddNode", "RemoveNode"])
def test_membership_rpcs_refuse_a_bad_address_and_need_raft(method: str) -> None:
    with InProcessCoordinator() as coordinator, coordinator.client_tls().channel(coordinator.address) as channel:
        call = getattr(pb_grpc.AdminServiceStub(channel), method)
        with pytest.raises(grpc.RpcError) as bad:
            call(pb.MembershipRequest(node="not an address"), timeout=5)
        with pytest.raises(grpc.RpcError) as no_raft:
            call(pb.MembershipRequest(node="127.0.0.1:7000", grpc="127.0.0.1:7001"), timeout=5)
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(bad.value.trailing_metadata())[REASON_METADATA_KEY] == "REASON_INVALID_FIELD"
    assert no_raft.value.code() is grpc.StatusCode.UNIMPLEMENTED
