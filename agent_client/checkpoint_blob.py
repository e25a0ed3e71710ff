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
from agent_client.blobs.chunking import Buffer

MAGIC = b"RPAC1\n"
MAX_CLIENT_SECTION = 4 * 1024 * 1024


class BlobFormatError(ValueError):
    """Not a blob AgentClient wrote, or a damaged one."""


def pack_parts(client: dict[str, Any], state: Any, *, schema_version: int) -> list[Buffer]:
    """pack()'s bytes as [the client section and the state's framing, the state's
    body]: the body is the caller's buffer (or its JSON encoding), not a copy, and the
    blob store stores the parts back to back without joining them. The body is a
    part of its own so that it is chunked apart from the client section in front,
    which changes with every checkpoint."""
    section = json.dumps(client, sort_keys=True, separators=(",", ":")).encode()
    *framing, body = state_codec.encode_parts(state, schema_version=schema_version)
    return [b"".join([MAGIC, section, b"\n", *framing]), body]


def pack(client: dict[str, Any], state: Any, *, schema_version: int) -> bytes:
    """The blob as one buffer (a copy of the state: the store takes pack_parts instead)."""
    return b"".join(pack_parts(client, state, schema_version=schema_version))


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
