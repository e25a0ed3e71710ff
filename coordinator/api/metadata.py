"""gRPC metadata keys of the raftpoint API, and how the reason code is spelled in one.

The server sets them and the client reads them, so both import them from here
(proto/v1/coordinator.proto documents them for clients in other languages).
"""
from __future__ import annotations

from typing import cast

from coordinator.api.v1 import coordinator_pb2 as pb

# Trailing, on UNAVAILABLE from a follower: the gRPC address of the leader it knows.
LEADER_METADATA_KEY = "raftpoint-leader"
# Request, on writes: when the client first sent it (seconds since the epoch, float
# repr), the same on every retry; the dedupe window is measured from it.
ISSUED_AT_METADATA_KEY = "raftpoint-issued-at"
# Trailing, on a refusal the coordinator decided: the ReasonCode value's name.
REASON_METADATA_KEY = "raftpoint-reason"
# Trailing, on RESOURCE_EXHAUSTED with REASON_OVERLOADED: seconds to wait before trying
# again (float repr); the node picks it from how far behind it is.
RETRY_AFTER_METADATA_KEY = "raftpoint-retry-after"
# Request: "Bearer <token>", the caller's identity when it has no client certificate.
AUTHORIZATION_METADATA_KEY = "authorization"


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata that presents `token` (none without one)."""
    return ((AUTHORIZATION_METADATA_KEY, f"Bearer {token}"),) if token else ()


def reason_value(reason_code: int) -> str:
    """A ReasonCode as the metadata carries it: its name, readable in any language."""
    return pb.ReasonCode.Name(reason_code)


def parse_reason(value: str | bytes | None) -> pb.ReasonCode:
    """The ReasonCode a metadata value names; REASON_UNSPECIFIED when absent or unknown
    (a newer coordinator may name reasons this client does not know yet)."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    try:
        # Value() is typed as a plain int; the number it gives is one of ReasonCode's.
        return cast(pb.ReasonCode, pb.ReasonCode.Value(value)) if value else pb.REASON_UNSPECIFIED
    except ValueError:
        return pb.REASON_UNSPECIFIED


def parse_retry_after(value: str | bytes | None) -> float | None:
    """The retry hint a metadata value carries, in seconds; None when absent or not a
    finite non-negative number (a client then falls back to its own backoff)."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None
