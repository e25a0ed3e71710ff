"""The leader's proposals still waiting for their entries to apply, and what ends the wait.

A proposal is answered by pysyncobj when an entry at its index applies here. For
a leader cut off from the majority that is only after the partition heals, and
its clients would wait for their deadline; so when this node stops leading,
every waiting proposal is answered at once. Its outcome is unknown (a majority
may hold the entry and the next leader commit it), which is exactly what the
proposer tells a client: retry with the same request id, which the dedupe table
answers whether or not the first attempt applied.

The proposer's decoding of each entry is kept here too, by the entry's bytes, so
the apply on this node does not decode it a second time.
"""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Callable

from coordinator.core.commands import Proposal

log = logging.getLogger(__name__)

DECODED_LIMIT = 10_000
GiveUp = Callable[[str], None]


class PendingProposals:
    """Used by the thread that proposes and by the Raft thread that applies."""

    def __init__(self) -> None:
        self._decoded: dict[bytes, Proposal] = {}
        self._waiting: dict[int, GiveUp] = {}  # guarded by _lock
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._was_leader = False

    def add(self, data: bytes, decoded: Proposal | None, give_up: GiveUp) -> int:
        """Register a proposal about to be handed to Raft; its number settles it."""
        if decoded is not None:
            if len(self._decoded) >= DECODED_LIMIT:  # entries lost to a leader change
                self._decoded.clear()
            self._decoded[data] = decoded
        number = next(self._numbers)
        with self._lock:
            self._waiting[number] = give_up
        return number

    def settle(self, number: int) -> bool:
        """End the wait of proposal `number`: False if it was already given up."""
        with self._lock:
            return self._waiting.pop(number, None) is not None

    def take_decoded(self, data: bytes) -> Proposal | None:
        """The proposer's decoding of the entry being applied, if this node proposed it."""
        return self._decoded.pop(data, None) if self._decoded else None

    def forget_decoded(self, data: bytes) -> None:
        """The entry will not apply (Raft refused it): drop its decoding."""
        self._decoded.pop(data, None)

    def track_leadership(self, leading: bool) -> None:
        """Called once per Raft tick: on losing the lead, answer every waiting proposal."""
        if self._was_leader and not leading:
            with self._lock:
                waiting, self._waiting = self._waiting, {}
            self._decoded.clear()
            if waiting:
                log.info("lost the lead with %d proposals waiting: their outcome is unknown", len(waiting))
            for give_up in waiting.values():
                give_up("LEADER_CHANGED")
        self._was_leader = leading
