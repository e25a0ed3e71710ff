"""Core refusals as gRPC statuses: the status code, the details text and the reason code.

Every RPC that refuses a request because of a Rejection (or a stored Failure)
aborts through abort_with(), so each refusal reaches the client the same way. A
refusal is first a Refused value (code, details, reason, leader hint): a unary call
ends with it as its status and trailers, an agent session answers the frame with it
as a FrameStatus, so both paths say exactly the same thing.
"""
from __future__ import annotations

from typing import NoReturn

import grpc

from coordinator.api.metadata import LEADER_METADATA_KEY, REASON_METADATA_KEY, reason_value
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


class Refused(Exception):
    """How a call ends when it does not succeed: the gRPC status code, the details text,
    the reason code (None: the status carries no `raftpoint-reason`, e.g. not the leader)
    and the leader's gRPC address when this node knows a better one."""

    def __init__(self, code: grpc.StatusCode, text: str, reason: ReasonCode | None = None,
                 leader: str | None = None) -> None:
        super().__init__(f"{code.name}: {text}")
        self.code, self.text, self.reason, self.leader = code, text, reason, leader

    @classmethod
    def of(cls, refusal: Rejection | Failure) -> "Refused":
        return cls(GRPC_CODE[refusal.code], details(refusal.field, refusal.reason), refusal.reason_code)

    async def abort(self, context: grpc.aio.ServicerContext, extra: tuple[tuple[str, str], ...] = ()) -> NoReturn:
        """End a call with this status and its trailers (and `extra` ones)."""
        trailers = list(extra)
        if self.reason is not None:
            trailers.append((REASON_METADATA_KEY, reason_value(REASON_TO_PB[self.reason])))
        if self.leader:
            trailers.append((LEADER_METADATA_KEY, self.leader))
        if trailers:
            context.set_trailing_metadata(tuple(trailers))
        await context.abort(self.code, self.text)
        raise AssertionError("context.abort returned")  # it raises; this keeps NoReturn honest

    def to_pb(self) -> pb.FrameStatus:
        """The same status as a session frame carries it."""
        return pb.FrameStatus(code=self.code.value[0], message=self.text, leader=self.leader or "",
                              reason=REASON_TO_PB[self.reason] if self.reason is not None else pb.REASON_UNSPECIFIED)


async def abort_with(context: grpc.aio.ServicerContext, refusal: Rejection | Failure, *,
                     trailers: tuple[tuple[str, str], ...] = ()) -> NoReturn:
    """End the RPC with the refusal's status, its details text and its reason code
    (and any further `trailers`, such as an overload's retry hint)."""
    await Refused.of(refusal).abort(context, trailers)
