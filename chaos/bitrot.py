"""Damage at rest for the bit-rot fault: flip bytes in a stopped node's files.

A bad disk or a careless hand changes bytes that were written and synced long
ago, not the tail a crash tears. So the flips land where durable data lives: in
the journal's first two thirds (entries long committed), inside a record of the
store (a JSON value, which every record holds), anywhere in the snapshot. A flip
may still hit something the node never reads again (a free LMDB page holding an
old copy): the node then starts, and must agree with the others like any node.

A node that refused to start is then repaired as documented
(coordinator.storage.data_dir.move_aside, `raftpoint repair --from-peers`).
"""
from __future__ import annotations

import random
from pathlib import Path

from coordinator.storage.protocol import JOURNAL_FILE, SNAPSHOT_FILE, STORE_DIR

JOURNAL, STORE, SNAPSHOT = "journal", "store", "snapshot"
TARGETS = (JOURNAL, STORE, SNAPSHOT)
FLIPS = 3
_RECORD = b'{"d":'  # how every stored value begins (coordinator.core.codec)


def file_of(data_dir: Path, what: str) -> Path:
    return {JOURNAL: data_dir / JOURNAL_FILE, STORE: data_dir / STORE_DIR / "data.mdb",
            SNAPSHOT: data_dir / SNAPSHOT_FILE}[what]


def offsets(data: bytes, what: str, rng: random.Random) -> list[int]:
    """Where to flip: FLIPS distinct byte positions of `data`, durable ones (module doc)."""
    if what == STORE:
        starts = [i for i in _find_all(data, _RECORD)]
        if starts:
            return sorted({rng.choice(starts) + rng.randrange(len(_RECORD), len(_RECORD) + 12)
                           for _ in range(FLIPS)})
    low, high = (len(data) // 10, 2 * len(data) // 3) if what == JOURNAL else (16, len(data))
    return sorted(rng.sample(range(low, max(high, low + FLIPS)), FLIPS))


def flip(data_dir: Path, what: str, rng: random.Random) -> dict[str, object] | None:
    """Flip bytes of one of the node's files (stopped); what was done, or None if it has no such file."""
    path = file_of(data_dir, what)
    if not path.exists() or path.stat().st_size < 64:
        return None
    data = bytearray(path.read_bytes())
    where = [i for i in offsets(bytes(data), what, rng) if i < len(data)]
    for i in where:
        data[i] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return {"file": str(path.relative_to(data_dir)), "offsets": where}


def _find_all(data: bytes, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    return found
