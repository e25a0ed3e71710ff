"""An in-memory store: the reference implementation for the conformance suite and
for agent_client.testing (which must not import LMDB).

Image format (big-endian, never pickle: an image may come from another node):
    magic b"RPMEMIMG" | u16 version | u64 applied_index | u64 count
    count x (u32 key length | key | u32 value length | value)
    sha256 of everything before it (32 bytes)
"""
from __future__ import annotations

import bisect
import hashlib
import struct
import threading
from typing import BinaryIO, Mapping

from coordinator.storage.digest import content_digest
from coordinator.storage.protocol import ImageError, check_commit, check_scan, scan_from

MAGIC = b"RPMEMIMG"
VERSION = 1
_HEAD = struct.Struct(">8sHQQ")  # magic, version, applied_index, entry count
_LEN = struct.Struct(">I")
_SUM = 32


class MemoryStore:
    """A dict for lookups plus a sorted key list for scans and digests.

    One lock guards both: digest()/stats() may run on other threads while the
    Raft thread commits, and must never see a half-applied batch."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._applied = 0
        self._used = 0  # sum of key and value lengths, kept so stats() is O(1)
        self._lock = threading.Lock()

    @property
    def applied_index(self) -> int:
        return self._applied

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def scan(self, prefix: bytes, start: bytes | None = None,
             limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(limit)
        out: list[tuple[bytes, bytes]] = []
        with self._lock:
            keys = self._keys
            i = bisect.bisect_left(keys, scan_from(prefix, start))
            while i < len(keys) and keys[i].startswith(prefix) and (limit is None or len(out) < limit):
                out.append((keys[i], self._data[keys[i]]))
                i += 1
        return out

    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        with self._lock:
            check_commit(self._applied, writes, applied_index)  # nothing below can fail
            for k, v in writes.items():
                old = self._data.get(k)
                if old is not None:
                    self._used -= len(k) + len(old)
                if v is None:
                    if old is not None:
                        del self._data[k]
                        self._keys.pop(bisect.bisect_left(self._keys, k))
                    continue
                if old is None:
                    bisect.insort(self._keys, k)
                self._data[k] = v
                self._used += len(k) + len(v)
            self._applied = applied_index

    def digest(self, skip: bytes | None = None) -> str:
        return self.digest_with_index(skip)[1]

    def digest_with_index(self, skip: bytes | None = None) -> tuple[int, str]:
        with self._lock:
            return self._applied, content_digest(((k, self._data[k]) for k in self._keys), skip)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"entries": len(self._data), "used_bytes": self._used, "capacity_bytes": 0}

    def close(self) -> None:
        """Nothing to release; the content stays readable, like a dict."""

    # ---- images ---------------------------------------------------------------------
    def write_image(self, fileobj: BinaryIO) -> int:
        with self._lock:
            parts = [_HEAD.pack(MAGIC, VERSION, self._applied, len(self._keys))]
            for k in self._keys:
                v = self._data[k]
                parts += [_LEN.pack(len(k)), k, _LEN.pack(len(v)), v]
        blob = b"".join(parts)
        blob += hashlib.sha256(blob).digest()
        fileobj.write(blob)
        return len(blob)

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        applied, data = _parse_image(fileobj.read(length), length)
        with self._lock:
            self._data, self._keys, self._applied = data, sorted(data), applied
            self._used = sum(len(k) + len(v) for k, v in data.items())


def _parse_image(raw: bytes, length: int) -> tuple[int, dict[bytes, bytes]]:
    """Validate everything before the caller replaces any state."""
    if len(raw) != length or length < _HEAD.size + _SUM:
        raise ImageError(f"truncated memory-store image: {len(raw)} of {length} bytes")
    body = memoryview(raw)[:-_SUM]
    magic, version, applied, count = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise ImageError(f"not a memory-store image (magic {magic!r})")
    if version != VERSION:
        raise ImageError(f"unsupported memory-store image version {version} (this build reads {VERSION})")
    if hashlib.sha256(body).digest() != raw[-_SUM:]:
        raise ImageError("memory-store image checksum mismatch")
    data: dict[bytes, bytes] = {}
    pos = _HEAD.size
    try:
        for _ in range(count):
            k, pos = _field(body, pos)
            data[k], pos = _field(body, pos)
    except struct.error as exc:
        raise ImageError(f"malformed memory-store image: {exc}") from None
    if pos != len(body) or len(data) != count:
        raise ImageError("malformed memory-store image: trailing bytes or duplicate keys")
    return applied, data


def _field(body: memoryview, pos: int) -> tuple[bytes, int]:
    (n,) = _LEN.unpack_from(body, pos)
    end = pos + _LEN.size + n
    if end > len(body):
        raise struct.error(f"field of {n} bytes at {pos} runs past the end")
    return bytes(body[pos + _LEN.size:end]), end
