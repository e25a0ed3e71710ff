"""A refusal reaches the client as a status code, the unchanged details text and a
reason code in the `raftpoint-reason` trailer, whichever path refused it."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from agent_client.connection import AsyncConnection, Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import REASON_METADATA_KEY, parse_reason, reason_value
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.core.errors import ReasonCode
from coordinator.transport.status_map import GRPC_CODE, REASON_TO_PB


def test_each_core_reason_maps_to_its_own_proto_value_and_back() -> None:
    assert sorted(REASON_TO_PB.values()) == sorted(pb.ReasonCode.values())  # a bijection, nothing left over
    for reason, value in REASON_TO_PB.items():
        assert pb.ReasonCode.Name(value) == f"REASON_{reason.name}"
        assert parse_reason(reason_value(value)) == value
        if reason is not ReasonCode.UNSPECIFIED:
            assert reason.code in GRPC_CODE


@pytest.mark.parametrize("value", [None, "", "REASON_FROM_THE_FUTURE", b"\xff"])
def test_an_absent_or_unknown_reason_reads_as_unspecified(value) -> None:
    assert parse_reason(value) == pb.REASON_UNSPECIFIED


# Imported by other modules: named apart from the fixture (docs/developing.md).
@pytest.fixture(scope="module", name="coordinator")
def coordinator_fixture():
    with InProcessCoordinator() as running, Connection([running.address], tls=running.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r1", group="g", agent_id="a"))
        conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="r2", group="g", agent_id="a"))
        yield running


def _raw_refusal(coordinator: InProcessCoordinator, method: str, request) -> grpc.RpcError:
    with coordinator.client_tls().channel(coordinator.address) as channel:
        service = "AgentService" if method in ("Heartbeat", "CommitCheckpoint") else "AdminService"
        stub = getattr(pb_grpc, f"{service}Stub")(channel)
        with pytest.raises(grpc.RpcError) as info:
            getattr(stub, method)(request, timeout=5)
    return info.value


def test_a_state_machine_refusal_carries_its_reason_and_keeps_its_text(coordinator) -> None:
    err = _raw_refusal(coordinator, "StartEpoch", pb.StartEpochRequest(request_id="e1", group="g"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err.details() == "group 'g' is cic_bcs, not coordinated"
    assert dict(err.trailing_metadata())[REASON_METADATA_KEY] == "REASON_NOT_COORDINATED"


def test_a_retried_refusal_is_answered_with_the_same_reason(coordinator) -> None:
    """The second send is answered from the dedupe table, reason code included."""
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        for _ in range(2):
            with pytest.raises(Rejected) as info:
                conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e2", group="g"))
            assert info.value.reason_code == pb.REASON_NOT_COORDINATED, info.value
            assert info.value.reason_name == "REASON_NOT_COORDINATED"


@pytest.mark.parametrize("method, request_, code, reason", [
    ("StartEpoch", pb.StartEpochRequest(request_id="bad id!", group="g"),
     grpc.StatusCode.INVALID_ARGUMENT, pb.REASON_INVALID_FIELD),
    ("GetGroup", pb.GetGroupRequest(group="nope"), grpc.StatusCode.NOT_FOUND, pb.REASON_GROUP_NOT_FOUND),
    ("Heartbeat", pb.HeartbeatRequest(group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=1)),
     grpc.StatusCode.FAILED_PRECONDITION, pb.REASON_STALE_INCARNATION),
    ("CommitCheckpoint", pb.CommitCheckpointRequest(request_id="c1", token=pb.FencingToken(secret=b"s" * 16, incarnation=2),
                                                    checkpoint=pb.CheckpointMeta(group="g", agent_id="a", index=1,
                                                                                 kind=pb.COORDINATED_CUT)),
     grpc.StatusCode.INVALID_ARGUMENT, pb.REASON_INVALID_FIELD),
])
def test_refusals_outside_the_state_machine_carry_a_reason_too(coordinator, method, request_, code, reason) -> None:
    err = _raw_refusal(coordinator, method, request_)
    assert err.code() == code, err
    assert parse_reason(dict(err.trailing_metadata()).get(REASON_METADATA_KEY)) == reason, err


def test_the_asyncio_connection_reads_the_reason_too(coordinator) -> None:
    async def refused() -> Rejected:
        async with AsyncConnection([coordinator.address], tls=coordinator.client_tls()) as conn:
            with pytest.raises(Rejected) as info:
                await conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e3", group="g"))
            return info.value

    assert asyncio.run(refused()).reason_code == pb.REASON_NOT_COORDINATED
