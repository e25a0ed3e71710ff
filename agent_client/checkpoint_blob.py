"""What AgentClient stores in a checkpoint blob: the client's own small section, then
the agent's state as state_codec wrote it.

The client section (protocol state of the CIC rule, the coordinated cut epoch, the
ids of recently delivered messages, where the recorded calls stood) must roll back *with* the agent's state, so it
lives in the same blob under the same SHA-256; keeping it in front as one JSON line
leaves the agent's bytes intact for chunk dedup and for state_codec's schema checks.
"""
from __future__ import annotations

import json
from typing import Any

from agent_client import state_codec

MAGIC = b"RPAC1\n"
MAX_CLIENT_SECTION = 4 * 1024 * 1024


class BlobFormatError(ValueError):
    """Not a blob AgentClient wrote, or a damaged one."""


def pack(client: dict[str, Any], state: Any, *, schema_version: int) -> bytes:
    section = json.dumps(client, sort_keys=True, separators=(",", ":")).encode()
    # One join: a 64 MiB state is copied once, not once per framing layer.
    return b"".join([MAGIC, section, b"\n", *state_codec.encode_parts(state, schema_version=schema_version)])


def unpack(data: bytes, *, expected_schema: int) -> tuple[dict[str, Any], Any]:
    """(client section, the agent's decoded state: bytes or a JSON value)."""
    if not data.startswith(MAGIC):
        raise BlobFormatError("not an agent_client checkpoint (missing header)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_CLIENT_SECTION)
    if end < 0:
        raise BlobFormatError("client section is truncated")
    try:
        client = json.loads(data[len(MAGIC):end])
        decoded = state_codec.decode(data[end + 1:], expected_schema=expected_schema)
    except (ValueError, state_codec.StateDecodeError) as exc:
        raise BlobFormatError(str(exc)) from None
    return client, decoded.value
