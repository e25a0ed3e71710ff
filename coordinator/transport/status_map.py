"""Core refusals as gRPC statuses: the status code, the details text and the reason code.

Every RPC that refuses a request because of a Rejection (or a stored Failure)
aborts through abort_with(), so each refusal reaches the client the same way.
"""
from __future__ import annotations

from typing import NoReturn

import grpc

from coordinator.api.metadata import REASON_METADATA_KEY, reason_value
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.commands import Failure
from coordinator.core.errors import Code, ReasonCode, Rejection

GRPC_CODE = {
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Code.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}
# The proto enum spells each core reason REASON_<name>.
REASON_TO_PB: dict[ReasonCode, int] = {r: pb.ReasonCode.Value(f"REASON_{r.name}") for r in ReasonCode}


def details(field: str, reason: str) -> str:
    return f"{field}: {reason}" if field else reason


async def abort_with(context: grpc.aio.ServicerContext, refusal: Rejection | Failure, *,
                     trailers: tuple[tuple[str, str], ...] = ()) -> NoReturn:
    """End the RPC with the refusal's status, its details text and its reason code
    (and any further `trailers`, such as an overload's retry hint)."""
    context.set_trailing_metadata(((REASON_METADATA_KEY, reason_value(REASON_TO_PB[refusal.reason_code])), *trailers))
    await context.abort(GRPC_CODE[refusal.code], details(refusal.field, refusal.reason))
    raise AssertionError("context.abort returned")  # it raises; this keeps NoReturn honest
