"""An in-memory store: the reference implementation for the conformance suite and
for agent_client.testing (which must not import LMDB)."""
from __future__ import annotations

import bisect
import hashlib
import struct
import threading
from typing import BinaryIO, Mapping

from coordinator.storage.digest import check_monotonic, content_digest

MAGIC = b"RPMEM\x00\x01\x00"
_HEAD = struct.Struct(">QQ")  # applied_index, entry count
_LEN = struct.Struct(">I")


class MemoryStore:
    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._applied = 0
        self._lock = threading.Lock()

    @property
    def applied_index(self) -> int:
        return self._applied

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        with self._lock:
            start = bisect.bisect_left(self._keys, prefix)
            out = []
            for k in self._keys[start:]:
                if not k.startswith(prefix):
                    break
                out.append((k, self._data[k]))
            return out

    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        check_monotonic(self._applied, applied_index)
        with self._lock:
            for k, v in writes.items():
                if v is None:
                    if self._data.pop(k, None) is not None:
                        self._keys.pop(bisect.bisect_left(self._keys, k))
                else:
                    if k not in self._data:
                        bisect.insort(self._keys, k)
                    self._data[k] = bytes(v)
            self._applied = applied_index

    def digest(self, skip: bytes | None = None) -> str:
        with self._lock:
            return content_digest(((k, self._data[k]) for k in self._keys), skip)

    def write_image(self, fileobj: BinaryIO) -> int:
        with self._lock:
            parts = [MAGIC, _HEAD.pack(self._applied, len(self._keys))]
            for k in self._keys:
                v = self._data[k]
                parts += [_LEN.pack(len(k)), k, _LEN.pack(len(v)), v]
        blob = b"".join(parts)
        fileobj.write(blob + hashlib.sha256(blob).digest())
        return len(blob) + 32

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        raw = fileobj.read(length)
        blob, checksum = raw[:-32], raw[-32:]
        if len(raw) != length or not blob.startswith(MAGIC) or hashlib.sha256(blob).digest() != checksum:
            raise ValueError("corrupt or truncated memory-store image")
        applied, count = _HEAD.unpack_from(blob, len(MAGIC))
        pos = len(MAGIC) + _HEAD.size
        data: dict[bytes, bytes] = {}
        for _ in range(count):
            (n,) = _LEN.unpack_from(blob, pos)
            k = blob[pos + 4:pos + 4 + n]
            pos += 4 + n
            (n,) = _LEN.unpack_from(blob, pos)
            data[k] = blob[pos + 4:pos + 4 + n]
            pos += 4 + n
        with self._lock:
            self._data, self._keys, self._applied = data, sorted(data), applied

    def stats(self) -> dict[str, int]:
        with self._lock:
            used = sum(len(k) + len(v) for k, v in self._data.items())
            return {"entries": len(self._data), "used_bytes": used, "capacity_bytes": 0}

    def close(self) -> None:
        pass
