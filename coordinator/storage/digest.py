"""The content digest both store kinds must compute identically."""
from __future__ import annotations

import hashlib
import struct
from typing import Iterable

_LEN = struct.Struct(">I")

# The layout of the replicated records a content digest covers. Nodes that store one
# history in different layouts digest it differently, so digests are compared only
# between nodes of one layout: bump this with every change to what a record's key or
# value holds. 0 is what nodes that predate the number report (the proto default);
# 2 keys request-id answers per identity.
CONTENT_LAYOUT = 2


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
