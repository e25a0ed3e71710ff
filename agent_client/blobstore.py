"""Content-addressed, chunked checkpoint blobs on a local directory (file:// URIs).

Blobs never go through Raft: an agent writes its state here and registers only the
manifest's URI and the state's SHA-256 with the coordinator. States are cut into
fixed 64 KiB chunks named by the SHA-256 of their plaintext, so a checkpoint that
changed 1% of a large state in place writes only the changed chunks. (Content-
defined chunking would also survive insertions; in-place updates are the common
case for agent state, and fixed chunks keep pure-Python writes fast.)

Optional AES-GCM (cryptography's AESGCM) encrypts each chunk with a random nonce and
the chunk's name as associated data; dedup still works on plaintext digests. Writes
are atomic (temp file, fsync, rename, fsync of the directory), so a crash never
leaves a partial chunk or manifest under its final name.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol
from urllib.parse import unquote, urlparse

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK_SIZE = 64 * 1024
MANIFEST_VERSION = 1
NONCE_BYTES = 12


class BlobError(Exception):
    pass


class BlobMissing(BlobError):
    pass


class BlobCorrupted(BlobError):
    pass


@dataclass(frozen=True)
class PutResult:
    uri: str
    sha256: str
    size: int
    bytes_written: int
    chunks_total: int
    chunks_new: int


class ChunkBackend(Protocol):
    """Where chunk and manifest bytes live; an object store can implement this."""

    def exists(self, key: str) -> bool: ...
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def delete(self, key: str) -> None: ...
    def keys(self, prefix: str) -> Iterable[str]: ...


class DirectoryBackend:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise BlobMissing(f"{key} is missing") from None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> Iterable[str]:
        base = self.root / prefix
        if base.exists():
            for path in base.rglob("*"):
                if path.is_file() and not path.name.startswith(".tmp-"):
                    yield str(path.relative_to(self.root))


def aead_key_from_env(env: dict[str, str] | None = None) -> bytes | None:
    """RAFTPOINT_AEAD_KEY (base64 of 32 bytes) or RAFTPOINT_AEAD_KEY_FILE (a mounted Secret)."""
    env = dict(os.environ) if env is None else env
    raw = env.get("RAFTPOINT_AEAD_KEY")
    if raw is None and env.get("RAFTPOINT_AEAD_KEY_FILE"):
        raw = Path(env["RAFTPOINT_AEAD_KEY_FILE"]).read_text().strip()
    if raw is None:
        return None
    key = base64.b64decode(raw)
    if len(key) != 32:
        raise ValueError(f"the AEAD key must be 32 bytes (base64), got {len(key)}")
    return key


@dataclass(frozen=True)
class Manifest:
    sha256: str
    size: int
    chunks: tuple[str, ...]
    encrypted: bool

    def to_json(self) -> bytes:
        return json.dumps({"v": MANIFEST_VERSION, "sha256": self.sha256, "size": self.size,
                           "chunks": list(self.chunks), "encrypted": self.encrypted}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "Manifest":
        try:
            doc = json.loads(data)
            if doc["v"] != MANIFEST_VERSION:
                raise BlobCorrupted(f"{where}: unsupported manifest version {doc['v']}")
            return cls(doc["sha256"], int(doc["size"]), tuple(doc["chunks"]), bool(doc["encrypted"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise BlobCorrupted(f"{where}: unreadable manifest ({exc})") from None


class LocalBlobStore:
    def __init__(self, root: str | Path, *, key: bytes | None = None, backend: ChunkBackend | None = None) -> None:
        self.root = Path(root).resolve()
        self.backend = backend or DirectoryBackend(self.root)
        self._aead = AESGCM(key) if key is not None else None

    # ---- naming ---------------------------------------------------------------------
    @staticmethod
    def _chunk_key(digest: str) -> str:
        return f"chunks/{digest[:2]}/{digest}"

    def _manifest_key(self, uri: str) -> str:
        parsed = urlparse(uri)
        path = Path(unquote(parsed.path))
        if parsed.scheme != "file" or path.parent != self.root / "manifests":
            raise BlobMissing(f"{uri} is not a manifest of the blob store at {self.root}")
        return f"manifests/{path.name}"

    # ---- write ----------------------------------------------------------------------
    def put(self, data: bytes) -> PutResult:
        digests, written, new = [], 0, 0
        for offset in range(0, len(data), CHUNK_SIZE):
            chunk = data[offset:offset + CHUNK_SIZE]
            digest = hashlib.sha256(chunk).hexdigest()
            digests.append(digest)
            key = self._chunk_key(digest)
            if not self.backend.exists(key):
                stored = self._seal(digest, chunk)
                self.backend.put(key, stored)
                written += len(stored)
                new += 1
        manifest = Manifest(hashlib.sha256(data).hexdigest(), len(data), tuple(digests), self._aead is not None)
        body = manifest.to_json()
        name = hashlib.sha256(body).hexdigest() + ".json"
        self.backend.put(f"manifests/{name}", body)
        written += len(body)
        uri = (self.root / "manifests" / name).as_uri()
        return PutResult(uri, manifest.sha256, len(data), written, len(digests), new)

    def _seal(self, digest: str, chunk: bytes) -> bytes:
        if self._aead is None:
            return chunk
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, chunk, digest.encode())

    # ---- read -----------------------------------------------------------------------
    def manifest(self, uri: str) -> Manifest:
        key = self._manifest_key(uri)
        return Manifest.from_json(self.backend.get(key), uri)

    def get(self, uri: str) -> bytes:
        """The state, every chunk and the whole verified; errors name what failed."""
        manifest = self.manifest(uri)
        if manifest.encrypted and self._aead is None:
            raise BlobCorrupted(f"{uri} is encrypted and no AEAD key is configured")
        parts = []
        for digest in manifest.chunks:
            stored = self.backend.get(self._chunk_key(digest))
            chunk = self._open(digest, stored) if manifest.encrypted else stored
            if hashlib.sha256(chunk).hexdigest() != digest:
                raise BlobCorrupted(f"chunk {digest} of {uri} does not match its digest")
            parts.append(chunk)
        data = b"".join(parts)
        if len(data) != manifest.size or hashlib.sha256(data).hexdigest() != manifest.sha256:
            raise BlobCorrupted(f"{uri}: reassembled state does not match its SHA-256")
        return data

    def _open(self, digest: str, stored: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(stored[:NONCE_BYTES], stored[NONCE_BYTES:], digest.encode())  # type: ignore[union-attr]
        except InvalidTag:
            raise BlobCorrupted(f"chunk {digest}: decryption failed (wrong key or tampered data)") from None

    # ---- delete ---------------------------------------------------------------------
    def delete(self, uri: str) -> None:
        self.backend.delete(self._manifest_key(uri))

    def collect_garbage(self) -> int:
        """Delete chunks no remaining manifest references; returns how many."""
        live: set[str] = set()
        for key in self.backend.keys("manifests"):
            live.update(Manifest.from_json(self.backend.get(key), key).chunks)
        removed = 0
        for key in list(self.backend.keys("chunks")):
            if key.rsplit("/", 1)[-1] not in live:
                self.backend.delete(key)
                removed += 1
        return removed
