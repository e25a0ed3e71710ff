"""The manifest: the one small document that turns a list of chunks into a state.

It is canonical JSON and stored under its own SHA-256, so the URI handed to the
coordinator pins the exact chunk list; a manifest whose bytes no longer hash to its
name is treated as missing (the checkpoint cannot be located), never half-trusted.

Each entry also says where its chunk is stored (pack id and offset), so a reader
finds every chunk from the manifest alone and GC marks packs from manifests alone:
no store-wide index has to be read, kept consistent, or trusted. An entry of two
fields (the only form before version 4) names a chunk stored as its own object. A
checkpoint whose new chunks total at most INLINE_MAX stored bytes carries them in
the manifest itself (pack INLINE): one file and its syncs instead of two.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from agent_client.blobs.chunking import MAX_CHUNK
from agent_client.blobs.errors import BlobMissing
from agent_client.blobs.layout import chunk_key, pack_key

VERSION = 4  # 4: entries locate their chunk in a pack; 3: compiled FastCDC, a chunk per object
READABLE_VERSIONS = frozenset({2, 3, VERSION})  # 2: the pure-Python chunker; reading never re-chunks
# The most chunks one manifest lists: a state of 4 GiB at the smallest chunks, about
# 20 GiB at typical ones. put() refuses a state that needs more, and a reader reads at
# most MAX_MANIFEST_BYTES + 1 of a manifest (the longest such a list can be), so a
# planted manifest of any size costs it no more.
MAX_CHUNKS = 2**18
PACK_ID_HEX = 32
INLINE = "inline"  # the pack "name" of chunks stored in the manifest naming them
INLINE_MAX = 16 * 1024  # stored bytes; a manifest is read whole, so this stays small
_MAX_OFFSET = MAX_CHUNKS * (MAX_CHUNK + 64)  # a pack holds at most one manifest's chunks, sealed
_MAX_ENTRY_BYTES = len('["%s",%d,"%s",%d],' % ("0" * 64, MAX_CHUNK, "0" * PACK_ID_HEX, _MAX_OFFSET))
MAX_MANIFEST_BYTES = 4096 + MAX_CHUNKS * _MAX_ENTRY_BYTES + 4 * INLINE_MAX // 3 + 4
MAX_COPY_CHARS = 256  # escaped, it still fits the room MAX_MANIFEST_BYTES leaves beside the chunk list
# Digests and the key id become parts of storage keys: only these forms are ever used.
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
_KEY_ID_RE = re.compile(r"[0-9a-f]{16}")
_PACK_RE = re.compile(r"[0-9a-f]{%d}" % PACK_ID_HEX)


@dataclass(frozen=True)
class ChunkRef:
    digest: str  # SHA-256 of the plaintext chunk; what a read is checked against
    size: int  # plaintext length
    pack: str | None = None  # the pack holding it, or INLINE; None: stored as its own object (older stores)
    offset: int = 0  # where its stored bytes start in the pack

    def key(self, key_id: str | None) -> str | None:
        """The storage key of the object holding this chunk; None for an inline chunk."""
        if self.pack == INLINE:
            return None
        return chunk_key(self.digest, key_id) if self.pack is None else pack_key(self.pack, key_id)

    def to_json(self) -> list[Any]:
        return [self.digest, self.size] if self.pack is None else [self.digest, self.size, self.pack, self.offset]

    @classmethod
    def from_json(cls, entry: Any) -> "ChunkRef":
        if not isinstance(entry, list) or len(entry) not in (2, 4):
            raise ValueError(f"chunk entry {entry!r} is neither [digest, size] nor [digest, size, pack, offset]")
        return cls(*entry)


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
    inline: bytes | None = None  # stored bytes of the chunks whose pack is INLINE
    # Set on a copy (copy_manifest): what it is a copy for. It gives the copy a name of
    # its own, so deleting either manifest leaves the other; omitted when unset, so
    # other manifests keep their bytes and readers that predate it read copies too.
    copy: str | None = None

    def to_json(self) -> bytes:
        doc = {
            "version": self.version, "size": self.size, "sha256": self.sha256, "chunking": self.chunking,
            "chunks": [c.to_json() for c in self.chunks],
            "encryption": None if self.key_id is None else {"cipher": self.cipher, "key_id": self.key_id},
            "parent": self.parent,
        }
        if self.inline is not None:  # absent otherwise: older manifests keep their bytes
            doc["inline"] = base64.b64encode(self.inline).decode()
        if self.copy is not None:
            doc["copy"] = self.copy
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        """The manifest's name. Kept once computed (the fields are frozen): a put asks for
        its parent's and its own several times, each a re-encoding of every chunk entry.
        (Not functools.cached_property: on Python 3.11 it takes a lock on every read.)"""
        digest = self.__dict__.get("_digest")
        if digest is None:
            digest = self.__dict__["_digest"] = hashlib.sha256(self.to_json()).hexdigest()
        return str(digest)

    @classmethod
    def from_json(cls, data: bytes, expected_digest: str, where: str) -> "Manifest":
        """The manifest `data` holds, checked whole before anything in it is used (its
        digests name storage keys); BlobMissing for anything this store never writes."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise BlobMissing(f"manifest {where} is larger than {MAX_MANIFEST_BYTES} bytes, more than any manifest "
                              "this store writes")
        if hashlib.sha256(data).hexdigest() != expected_digest:
            raise BlobMissing(f"manifest {where} is truncated or altered (its bytes do not hash to its name)")
        try:
            doc = json.loads(data)
            if doc["version"] not in READABLE_VERSIONS:
                raise BlobMissing(f"manifest {where} has unsupported version {doc['version']}")
            enc = doc["encryption"] or {}
            inline = None if doc.get("inline") is None else base64.b64decode(doc["inline"], validate=True)
            manifest = cls(doc["size"], doc["sha256"], tuple(ChunkRef.from_json(e) for e in doc["chunks"]),
                           doc["chunking"], enc.get("key_id"), enc.get("cipher"), doc["parent"], doc["version"],
                           inline=inline, copy=doc.get("copy"))
            manifest._check()
            return manifest
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise BlobMissing(f"manifest {where} is unreadable ({exc!r})") from None

    def _check(self) -> None:
        """ValueError unless every field has the form and range put() gives it."""
        if not (_is_int(self.version, 0) and _is_int(self.size, 0) and _is_digest(self.sha256)
                and isinstance(self.chunking, str)):
            raise ValueError("version, size, sha256 or chunking malformed")
        if self.copy is not None and not (isinstance(self.copy, str) and len(self.copy) <= MAX_COPY_CHARS):
            raise ValueError(f"copy is not a string of at most {MAX_COPY_CHARS} characters")
        if self.parent is not None and not _is_digest(self.parent):
            raise ValueError(f"parent {self.parent!r} is not a SHA-256 digest")
        if self.key_id is not None and not (isinstance(self.key_id, str) and _KEY_ID_RE.fullmatch(self.key_id)
                                            and isinstance(self.cipher, str)):
            raise ValueError(f"encryption key id {self.key_id!r} malformed")
        if self.inline is not None and not (isinstance(self.inline, bytes) and len(self.inline) <= INLINE_MAX):
            raise ValueError(f"more than {INLINE_MAX} inline bytes")
        if len(self.chunks) > MAX_CHUNKS:
            raise ValueError(f"{len(self.chunks)} chunks, more than {MAX_CHUNKS}")
        for ref in self.chunks:
            if not (_is_digest(ref.digest) and _is_int(ref.size, 1, MAX_CHUNK)):
                raise ValueError(f"chunk {ref.digest!r} of {ref.size!r} bytes malformed")
            if ref.pack == INLINE:
                if self.inline is None or not (_is_int(ref.offset, 0) and ref.offset + ref.size <= len(self.inline)):
                    raise ValueError(f"inline chunk {ref.digest!r} at {ref.offset!r} lies outside the inline bytes")
            elif ref.pack is not None and not (isinstance(ref.pack, str) and _PACK_RE.fullmatch(ref.pack)
                                               and _is_int(ref.offset, 0, _MAX_OFFSET)):
                raise ValueError(f"chunk {ref.digest!r} located at {ref.pack!r}+{ref.offset!r}: malformed")
        if sum(ref.size for ref in self.chunks) != self.size:
            raise ValueError(f"the chunks' sizes do not add up to size {self.size}")


def check_chunk_count(count: int, size: int) -> None:
    """ValueError when a state of `size` bytes cut into `count` chunks needs a manifest
    longer than readers accept (put() asks before writing anything)."""
    if count > MAX_CHUNKS:
        raise ValueError(f"a state of {size} bytes cuts into {count} chunks, more than the {MAX_CHUNKS} one "
                         "manifest may list: checkpoint it in parts")


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def _is_int(value: Any, low: int, high: int | None = None) -> bool:
    return type(value) is int and low <= value and (high is None or value <= high)
