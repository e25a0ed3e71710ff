"""Core rejection codes as gRPC status codes."""
from __future__ import annotations

import grpc

from coordinator.core.errors import Code

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
