"""The content digest both store kinds must compute identically."""
from __future__ import annotations

import hashlib
import struct
from typing import Iterable

_LEN = struct.Struct(">I")


def content_digest(items: Iterable[tuple[bytes, bytes]], skip: bytes | None = None) -> str:
    h = hashlib.sha256()
    for key, value in items:
        if skip is not None and key.startswith(skip):
            continue
        h.update(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
    return h.hexdigest()


def check_monotonic(current: int, new: int) -> None:
    if new < current:
        raise ValueError(f"applied_index may not go backwards ({current} -> {new})")
