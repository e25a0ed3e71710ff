"""The manifest: the one small document that turns a list of chunks into a state.

It is canonical JSON and stored under its own SHA-256, so the URI handed to the
coordinator pins the exact chunk list; a manifest whose bytes no longer hash to its
name is treated as missing (the checkpoint cannot be located), never half-trusted.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from agent_client.blobs.errors import BlobMissing

VERSION = 3  # 3: chunks cut by compiled FastCDC (see chunking.ALGORITHM); layout unchanged
READABLE_VERSIONS = frozenset({2, VERSION})  # 2: the pure-Python chunker; reading never re-chunks


@dataclass(frozen=True)
class ChunkRef:
    digest: str  # SHA-256 of the plaintext chunk; also its storage name
    size: int  # plaintext length


@dataclass(frozen=True)
class Manifest:
    size: int
    sha256: str  # of the whole plaintext state: what the coordinator records
    chunks: tuple[ChunkRef, ...]
    chunking: str
    key_id: str | None = None  # None: chunks stored in clear
    cipher: str | None = None
    parent: str | None = None  # manifest digest of the checkpoint this one was written against
    version: int = VERSION  # kept as read, so an old manifest re-serialises to the bytes it was named by

    def to_json(self) -> bytes:
        doc = {
            "version": self.version, "size": self.size, "sha256": self.sha256, "chunking": self.chunking,
            "chunks": [[c.digest, c.size] for c in self.chunks],
            "encryption": None if self.key_id is None else {"cipher": self.cipher, "key_id": self.key_id},
            "parent": self.parent,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()

    @classmethod
    def from_json(cls, data: bytes, expected_digest: str, where: str) -> "Manifest":
        if hashlib.sha256(data).hexdigest() != expected_digest:
            raise BlobMissing(f"manifest {where} is truncated or altered (its bytes do not hash to its name)")
        try:
            doc = json.loads(data)
            if doc["version"] not in READABLE_VERSIONS:
                raise BlobMissing(f"manifest {where} has unsupported version {doc['version']}")
            enc = doc["encryption"] or {}
            return cls(int(doc["size"]), str(doc["sha256"]),
                       tuple(ChunkRef(str(d), int(n)) for d, n in doc["chunks"]), str(doc["chunking"]),
                       enc.get("key_id"), enc.get("cipher"), doc["parent"], int(doc["version"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise BlobMissing(f"manifest {where} is unreadable ({exc!r})") from None
