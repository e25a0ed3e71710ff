"""Checkpoints whose state travels inside the commit, as an RFC 2397 data: URI.

A small state costs more as a blob (a file, its directory entry and a sync, or a PUT)
than the coordinator's commit that names it. Given as the commit's blob URI instead,
it is replicated and made durable by the Raft commit alone, and it goes with its
record: garbage collection has no blob to delete for it.

The cap keeps Raft entries, the record cache and listings small: a data URI holds at
most MAX_INLINE_BYTES of state (base64 makes its text a third longer). One parser
serves both sides: the coordinator checks a data URI's bytes against the commit's
SHA-256 and size (validation.py); the agent's blob store writes and reads them.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

SCHEME = "data:"
MEDIA_TYPE = "application/octet-stream"
MAX_INLINE_BYTES = 8 * 1024
# Room for the media type and parameters (the store writes 103 characters of them).
_MAX_HEADER_CHARS = 256
MAX_DATA_URI_CHARS = len(SCHEME) + _MAX_HEADER_CHARS + 4 * -(-MAX_INLINE_BYTES // 3)
_SHA256_PARAM = "sha256"
_HEX64_RE = re.compile(r"[0-9a-f]{64}")


class MalformedDataUri(ValueError):
    """Not a data URI this system reads: its text says what is wrong with it."""


@dataclass(frozen=True)
class InlineState:
    """A data URI's bytes, and the SHA-256 its `sha256` parameter names (None without one)."""

    data: bytes
    sha256: str | None


def is_inline(uri: str) -> bool:
    """Whether `uri` carries its state itself (a data: URI; the scheme is case-insensitive)."""
    return uri[:len(SCHEME)].lower() == SCHEME


def encode(data: bytes, sha256: str) -> str:
    """`data` as a data URI naming its SHA-256, so a reader can check it on its own."""
    return f"{SCHEME}{MEDIA_TYPE};{_SHA256_PARAM}={sha256};base64,{base64.b64encode(data).decode('ascii')}"


def decode(uri: str) -> InlineState:
    """The bytes of a base64 data URI of at most MAX_INLINE_BYTES, or MalformedDataUri."""
    if not is_inline(uri):
        raise MalformedDataUri("is not a data: URI")
    if len(uri) > MAX_DATA_URI_CHARS:
        raise MalformedDataUri(f"is {len(uri)} characters: a data URI holds at most {MAX_INLINE_BYTES} bytes "
                               f"({MAX_DATA_URI_CHARS} characters); write a larger state to a blob store")
    if not (uri.isascii() and uri.isprintable()):
        raise MalformedDataUri("must be printable ASCII (RFC 2397: base64 data, no control characters)")
    header, comma, payload = uri[len(SCHEME):].partition(",")
    params = header.split(";")
    if not comma or params[-1].lower() != "base64":
        raise MalformedDataUri("must be data:[<media type>][;<name>=<value>]*;base64,<data> (RFC 2397, base64)")
    sha256 = None
    for param in params[1:-1]:
        name, eq, value = param.partition("=")
        if not eq or not name:
            raise MalformedDataUri(f"has a parameter {param[:40]!r} that is not name=value")
        if name.lower() == _SHA256_PARAM:
            if not _HEX64_RE.fullmatch(value):
                raise MalformedDataUri("has a sha256 parameter that is not 64 lowercase hex digits")
            sha256 = value
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedDataUri("has data that is not valid base64") from None
    if len(data) > MAX_INLINE_BYTES:
        raise MalformedDataUri(f"holds {len(data)} bytes: a data URI holds at most {MAX_INLINE_BYTES}")
    return InlineState(data, sha256)


def shown_uri(uri: str) -> str:
    """A blob URI as listings print it: a data URI as its size, not kilobytes of base64."""
    if not is_inline(uri):
        return uri
    payload = uri.partition(",")[2]
    return f"data: ({len(payload) * 3 // 4 - payload[-2:].count('=')} bytes inline)"
