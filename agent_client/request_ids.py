"""Request ids of an agent's writes.

The coordinator answers a request id it has seen from its dedupe table instead of
applying the write again, keeps each identity's ids apart, and refuses an id its
identity already used for another command. So an id must be:

- the same on every retry of one write (the connection resends the very request,
  id included, and a caller that keeps a request to resend it keeps its id);
- different for any two writes that must both apply: across groups, agents and
  client instances, and for two writes with the same content when both must apply
  (a `nonce` tells those apart: a dependency report sent again after a rollback);
- different whenever the content differs, so a write rebuilt with, say, a newer
  epoch in its token is a new write, never a reused id;
- unpredictable: one id seen (in a log line, on the wire) tells nothing about the
  next ones, so no one can take an agent's next id first.

Hence an HMAC-SHA256 of the request's content, under a key each instance draws at
random and never shows, with the kind of write in front for people reading logs.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)
KEY_BYTES = 32
DIGEST_CHARS = 32  # 128 bits of the HMAC: collisions between writes are out of reach


class RequestIds:
    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(KEY_BYTES)

    def stamp(self, op: str, request: M, nonce: object = "") -> M:
        """`request` with its request id set (from its content, the id field aside)."""
        request.request_id = ""  # type: ignore[attr-defined]
        content = request.SerializeToString(deterministic=True)
        mac = hmac.new(self._key, f"{op}\0{nonce}\0".encode() + content, hashlib.sha256)
        request.request_id = f"{op}-{mac.hexdigest()[:DIGEST_CHARS]}"  # type: ignore[attr-defined]
        return request
