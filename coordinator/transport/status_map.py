"""Core rejection codes as gRPC status codes."""
from __future__ import annotations

import grpc

from coordinator.core.commands import Failure
from coordinator.core.errors import Code, Rejection

GRPC_CODE = {
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
}
LEADER_METADATA_KEY = "raftpoint-leader"
ISSUED_AT_METADATA_KEY = "raftpoint-issued-at"


def details(field: str, reason: str) -> str:
    return f"{field}: {reason}" if field else reason


async def abort_refused(context: grpc.aio.ServicerContext, refusal: Rejection | Failure) -> None:
    """End the call with a refused command's status: the one mapping of a core
    refusal, raised before proposing or answered by the state machine, to gRPC."""
    await context.abort(GRPC_CODE[refusal.code], details(refusal.field, refusal.reason))
