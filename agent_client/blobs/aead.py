"""Optional per-chunk AES-GCM, so a blob store on shared storage reveals no state.

Each chunk gets a fresh random 96-bit nonce (AESGCM's recommended size; random nonces
are safe far beyond the number of chunks one key will ever seal) and associated data
binding the chunk's plaintext digest, so a chunk file swapped for another valid
ciphertext under the same key fails authentication instead of restoring wrong state.

Chunks are still *named* by their plaintext SHA-256 so dedup works across checkpoints;
the cost is that someone who can list the store can confirm a guessed chunk content.
Each key writes into its own namespace (by key id, a one-way tag of the key), so a
chunk sealed under one key is never mistaken for one sealed under another or stored
in clear.
"""
from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_client.blobs.backend import Buffer
from agent_client.blobs.errors import BlobCorrupted

ENV_KEY = "RAFTPOINT_AEAD_KEY"
ENV_KEY_FILE = "RAFTPOINT_AEAD_KEY_FILE"
NONCE_BYTES = 12
OVERHEAD = NONCE_BYTES + 16  # a sealed chunk is its plaintext plus the nonce and GCM's tag
ALGORITHM = "AES-256-GCM"
_AAD_PREFIX = b"raftpoint-chunk-v1:"


def aead_key_from_env(env: Mapping[str, str] | None = None) -> bytes | None:
    """RAFTPOINT_AEAD_KEY (base64 of 32 bytes) or RAFTPOINT_AEAD_KEY_FILE (a mounted
    Kubernetes Secret holding the same base64 text); None when neither is set."""
    env = os.environ if env is None else env
    raw = env.get(ENV_KEY)
    if raw is None and env.get(ENV_KEY_FILE):
        raw = Path(env[ENV_KEY_FILE]).read_text().strip()
    if raw is None:
        return None
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError:
        raise ValueError(f"the AEAD key is not valid base64 ({ENV_KEY} / {ENV_KEY_FILE})") from None
    if len(key) != 32:
        raise ValueError(f"the AEAD key must be 32 bytes (base64), got {len(key)}")
    return key


def key_id(key: bytes) -> str:
    """A short public tag naming the key in manifests; reveals nothing about it."""
    return hashlib.sha256(b"raftpoint-aead-key-id-v1" + key).hexdigest()[:16]


class ChunkCipher:
    """AES-256-GCM sealing of chunk plaintexts, authenticated against their digest."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError(f"the AEAD key must be 32 bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self.key_id = key_id(key)

    def seal(self, digest: str, plaintext: Buffer) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, _AAD_PREFIX + digest.encode())

    def open(self, digest: str, stored: bytes, where: str) -> bytes:
        try:
            return self._aead.decrypt(stored[:NONCE_BYTES], stored[NONCE_BYTES:], _AAD_PREFIX + digest.encode())
        except InvalidTag:
            raise BlobCorrupted(f"decryption failed for chunk {digest} of {where} "
                                "(wrong key, or the chunk was tampered with)") from None
