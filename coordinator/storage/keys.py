"""Order-preserving composite keys: (table, part, part, ...) -> bytes.

Byte order equals tuple order for same-typed parts, so a prefix scan of
(checkpoint, group, agent) yields that agent's checkpoints by index. Strings end
in NUL (ids may not contain it); ints are tagged 8-byte big-endian.
"""
from __future__ import annotations

import struct
from functools import lru_cache

_STR, _INT = b"s", b"i"
_U64 = struct.Struct(">Q")


@lru_cache(maxsize=1 << 16, typed=True)
def _part(part: str | int) -> bytes:
    """Cached: the same group and agent ids are encoded for every key of every entry."""
    if isinstance(part, bool) or not isinstance(part, (str, int)):
        raise TypeError(f"key parts are str or int, got {type(part).__name__}")
    if isinstance(part, int):
        if not 0 <= part < 1 << 64:
            raise ValueError(f"int key part out of range: {part}")
        return _INT + _U64.pack(part)
    if "\x00" in part:
        raise ValueError("string key parts may not contain NUL")
    return _STR + part.encode() + b"\x00"


def prefix(table: str, *parts: str | int) -> bytes:
    return _part(table) + b"".join(_part(p) for p in parts)


def key(table: str, *parts: str | int) -> bytes:
    return prefix(table, *parts)


def parse(raw: bytes) -> tuple[str, tuple[str | int, ...]]:
    parts: list[str | int] = []
    i = 0
    while i < len(raw):
        tag = raw[i:i + 1]
        if tag == _INT:
            parts.append(_U64.unpack_from(raw, i + 1)[0])
            i += 9
        elif tag == _STR:
            end = raw.index(b"\x00", i + 1)
            parts.append(raw[i + 1:end].decode())
            i = end + 1
        else:
            raise ValueError(f"bad key tag {tag!r} at {i}")
    if not parts or not isinstance(parts[0], str):
        raise ValueError("a key starts with its table name")
    return parts[0], tuple(parts[1:])  # type: ignore[return-value]
