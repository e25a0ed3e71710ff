"""Order-preserving composite keys: (table, part, part, ...) -> bytes.

Why this encoding: the stores only order raw bytes, and the state layer needs
range scans such as "this agent's checkpoints by index". Each part is a tag byte
followed by its payload:

- int: b"i" + 8-byte big-endian unsigned (fixed width, so byte order = numeric order);
- str: b"s" + UTF-8 + b"\\x00" (UTF-8 byte order = code-point order, and the NUL
  terminator sorts "a" before "ab" and stops prefix("t", "a") from matching "ab").

The tag keeps an int part and a str part from ever encoding to the same bytes
(ints sort before strings at the same position). Byte order of keys therefore
equals the natural order of (table, parts) tuples whose parts have the same types,
including tuples of different lengths (a tuple sorts before its extensions).
"""
from __future__ import annotations

import struct
from functools import lru_cache

_STR, _INT = b"s", b"i"
_U64 = struct.Struct(">Q")

Part = str | int


@lru_cache(maxsize=1 << 16, typed=True)
def _part(part: Part) -> bytes:
    """Cached: the same group and agent ids are encoded for every key of every entry."""
    if isinstance(part, bool) or not isinstance(part, (str, int)):
        raise TypeError(f"key parts are str or int, got {type(part).__name__}")
    if isinstance(part, int):
        if not 0 <= part < 1 << 64:
            raise ValueError(f"int key part out of range 0..2**64-1: {part}")
        return _INT + _U64.pack(part)
    if "\x00" in part:
        raise ValueError(f"string key parts may not contain NUL: {part!r}")
    return _STR + part.encode() + b"\x00"


def prefix(table: str, *parts: Part) -> bytes:
    """The byte prefix shared by every key whose table and first parts are these."""
    if not isinstance(table, str):
        raise TypeError(f"the table name is a str, got {type(table).__name__}")
    return _part(table) + b"".join(map(_part, parts))


def key(table: str, *parts: Part) -> bytes:
    """A full key. Same bytes as prefix(): a key is also the prefix of its extensions."""
    return prefix(table, *parts)


def parse(raw: bytes) -> tuple[str, tuple[Part, ...]]:
    """Inverse of key(); ValueError for bytes key() cannot have produced."""
    parts: list[Part] = []
    i = 0
    while i < len(raw):
        tag = raw[i:i + 1]
        if tag == _INT:
            if i + 9 > len(raw):
                raise ValueError(f"truncated int key part at {i}")
            parts.append(_U64.unpack_from(raw, i + 1)[0])
            i += 9
        elif tag == _STR:
            end = raw.find(b"\x00", i + 1)
            if end < 0:
                raise ValueError(f"unterminated string key part at {i}")
            parts.append(raw[i + 1:end].decode())
            i = end + 1
        else:
            raise ValueError(f"bad key tag {tag!r} at {i}")
    if not parts or not isinstance(parts[0], str):
        raise ValueError("a key starts with its table name")
    return parts[0], tuple(parts[1:])  # type: ignore[return-value]
