"""Bytes that are no message of the method's type are the client's error: INVALID_ARGUMENT,
with the reason code, and no server traceback per request."""
from __future__ import annotations

import logging

import grpc
import pytest

from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import REASON_METADATA_KEY

GARBAGE = b"\xff\xff\xff\xff"


@pytest.mark.parametrize("method", ["/raftpoint.v1.AgentService/Register",
                                    "/raftpoint.v1.AgentService/WatchOrders"])
def test_an_undecodable_request_is_refused_as_invalid_without_an_error_log(
        method: str, caplog: pytest.LogCaptureFixture) -> None:
    with InProcessCoordinator() as coordinator, coordinator.client_tls().channel(coordinator.address) as channel:
        caplog.set_level(logging.INFO)
        if method.endswith("WatchOrders"):
            call = channel.unary_stream(method)
            with pytest.raises(grpc.RpcError) as info:
                list(call(GARBAGE, timeout=5))
        else:
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(method)(GARBAGE, timeout=5)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert info.value.details().startswith("request: does not decode")
    assert dict(info.value.trailing_metadata())[REASON_METADATA_KEY] == "REASON_INVALID_FIELD"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_huge_request_id_is_refused_without_a_huge_log_line(capfd: pytest.CaptureFixture[str],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    from agent_client.connection import Connection, Rejected
    from coordinator.api.v1 import coordinator_pb2 as pb

    huge = "x" * 1_000_000
    caplog.set_level(logging.INFO)
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        capfd.readouterr()
        with pytest.raises(Rejected) as info:
            conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id=huge, group="g",
                                                                     agent_id="a"))
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and len(info.value.reason) < 300
    # The line goes to stdlib logging, or to stdout when an earlier test in this process
    # configured structlog to print: look in both.
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "rpc refused" in logged and len(logged) < 5_000
