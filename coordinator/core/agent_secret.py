"""An agent's registration secret: what proves a write comes from the agent itself.

The incarnation number fences zombies but is no secret (GetGroup shows it). The
client draws a random secret per registration and sends it over the (TLS) channel;
the coordinator keeps and replicates only its SHA-256, so neither the log nor a
snapshot nor a read holds anything that lets a reader write as the agent. A
retried registration repeats the same secret, so deduplication is unchanged.
"""
from __future__ import annotations

import hashlib

from coordinator.core.errors import Rejection

MIN_SECRET_BYTES = 16
MAX_SECRET_BYTES = 64


def digest(secret: bytes) -> bytes:
    """What is proposed and stored in place of the secret."""
    return hashlib.sha256(secret).digest()


def check(secret: bytes, field: str = "secret") -> None:
    """A registration's secret must be long enough not to be guessed."""
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise Rejection.invalid(field, f"must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes chosen by "
                                f"the client for this registration, got {len(secret)}")
