"""Setting a stopped node up to be rebuilt from its peers (`raftpoint repair --from-peers`).

Two steps, in this order: the term file records that the node's log is lost
(journal_file.mark_log_lost: until a leader has caught its log up, the node grants
no vote and stands for no election), then the journal, snapshot and store are moved
aside (storage.data_dir.move_aside). A crash between the two leaves a node that
still has its files and will not vote until caught up: safe, and the repair can be
run again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.replication.journal_file import mark_log_lost
from coordinator.storage.data_dir import move_aside
from coordinator.storage.protocol import JOURNAL_FILE


@dataclass(frozen=True)
class Prepared:
    aside: Path  # where the files went (not created when nothing was moved)
    moved: list[str]  # the names moved
    kept_vote: bool  # a term file was there: the node keeps its term and vote, and is marked


def prepare_rebuild(data_dir: Path) -> Prepared:
    """Mark the log lost, then move what the peers give back aside. Raises OSError,
    or ValueError for a term file that does not parse."""
    kept_vote = mark_log_lost(data_dir / JOURNAL_FILE)
    aside, moved = move_aside(data_dir)
    return Prepared(aside, moved, kept_vote)
