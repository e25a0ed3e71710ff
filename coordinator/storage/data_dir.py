"""Rebuilding a node from its peers: what is moved out of its data dir, and what stays.

The one repair for data damaged at rest (journal, store or snapshot): the peers
hold every committed entry, so a node started without its journal, snapshot and
store catches up from the leader (entries or a snapshot). Its term and vote file
stays: without it, the node could vote twice in a term it already voted in.
Nothing is deleted -- the damaged files are kept beside the new ones for a look.
"""
from __future__ import annotations

from pathlib import Path

from coordinator.storage.protocol import REBUILT_FROM_PEERS

ASIDE_PREFIX = "damaged-"


def move_aside(data_dir: Path) -> tuple[Path, list[str]]:
    """Move what the peers can give back into a new `damaged-N` directory; (it, the names moved)."""
    n = 0
    while (data_dir / f"{ASIDE_PREFIX}{n}").exists():
        n += 1
    aside = data_dir / f"{ASIDE_PREFIX}{n}"
    present = [name for name in REBUILT_FROM_PEERS if (data_dir / name).exists()]
    if not present:
        return aside, []
    aside.mkdir()
    for name in present:
        (data_dir / name).rename(aside / name)
    return aside, present
