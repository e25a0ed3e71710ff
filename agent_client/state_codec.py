"""Agent state <-> checkpoint bytes, self-describing and never pickled.

Restore may run in a newer build of the agent than the one that checkpointed, so the
bytes carry a small header saying how to decode them (content type) and which state
schema they follow; the reader can refuse a schema it does not understand instead of
misreading it. JSON is canonical (sorted keys, no whitespace, no NaN) so the same
state always encodes to the same bytes: digests are stable and unchanged states dedup.
Unpickling checkpoint bytes would execute whatever the blob store holds: never.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

MAGIC = b"RPST1\n"
BYTES = "application/octet-stream"
JSON = "application/json"
_MAX_HEADER = 4096


class StateDecodeError(ValueError):
    """The bytes are not a state this codec wrote, or are damaged."""


def canonical_json(value: Any) -> bytes:
    """One encoding per value: what digests and config hashes are computed over."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state is not JSON-serialisable ({exc}); pass bytes or plain JSON values") from None


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the agent's configuration.

    Same bytes as AgentClient's config hash (sorted keys, compact, ASCII), so hashes
    computed by either agree."""
    return hashlib.sha256(canonical_json(dict(config))).hexdigest()


@dataclass(frozen=True)
class DecodedState:
    schema_version: int
    content_type: str
    value: Any  # bytes for BYTES, the JSON value for JSON


def encode(state: Any, *, schema_version: int) -> bytes:
    """bytes are stored as is; anything else must be JSON-able (tuples become lists)."""
    return b"".join(encode_parts(state, schema_version=schema_version))


def encode_parts(state: Any, *, schema_version: int) -> list[bytes | bytearray | memoryview]:
    """encode()'s bytes as pieces, the state's own buffer among them uncopied, so a
    caller that frames them further (checkpoint_blob) copies a large state once."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        content_type, body = BYTES, state
    else:
        content_type, body = JSON, canonical_json(state)
    header = canonical_json({"content_type": content_type, "schema_version": int(schema_version)})
    return [MAGIC, header, b"\n", body]


def peek_header(data: bytes) -> tuple[int, str, int]:
    """(schema_version, content_type, body offset) without decoding the body."""
    if not data.startswith(MAGIC):
        raise StateDecodeError("not an encoded agent state (missing header)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + _MAX_HEADER)
    if end < 0:
        raise StateDecodeError("state header is truncated")
    try:
        header = json.loads(data[len(MAGIC):end])
        return int(header["schema_version"]), str(header["content_type"]), end + 1
    except (ValueError, KeyError, TypeError) as exc:
        raise StateDecodeError(f"state header is unreadable ({exc!r})") from None


def decode(data: bytes, *, expected_schema: int | None = None) -> DecodedState:
    schema, content_type, offset = peek_header(data)
    if expected_schema is not None and schema != expected_schema:
        raise StateDecodeError(f"state schema version {schema}, expected {expected_schema}")
    body = data[offset:]
    if content_type == BYTES:
        return DecodedState(schema, content_type, body)
    if content_type == JSON:
        try:
            return DecodedState(schema, content_type, json.loads(body))
        except ValueError as exc:
            raise StateDecodeError(f"JSON state body is damaged ({exc})") from None
    raise StateDecodeError(f"unknown content type {content_type!r}")
