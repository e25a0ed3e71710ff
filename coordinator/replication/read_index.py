"""Linearizable reads without a log entry: Raft's ReadIndex (thesis section 6.4), as
bookkeeping apart from I/O.

A leader may serve a read from its applied state once it knows that (1) it was still
the leader after the read arrived, and (2) its state holds every entry committed
before then. For (2) the read waits until the node has applied the read index: its
commit index when the read arrived, or, while no entry of its own term is committed
yet, the end of its log (its first entry of the term; a new leader does not yet
know how far its predecessor committed). For (1) the leader starts a round: every
AppendEntries it sends from then on carries the round's number, and each follower
that accepts one answers with an acknowledgement of that number in the same term.
Once a majority, the leader included, has acknowledged a round, no other leader can
have been elected before that round began: those followers had not moved on.

A read therefore costs a round trip to a majority (shared by every read that arrives
in one tick) and no journal write, where a read barrier entry costs an append, an
fsync on a majority and a store commit.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

ReadDone = Callable[[str | None], None]  # None: the read may be served now; else why not
NOT_LEADER = "NOT_LEADER"
LEADER_CHANGED = "LEADER_CHANGED"


@dataclass(frozen=True)
class PendingRead:
    round: int
    index: int  # the read index: serve once the applied state reaches it
    done: ReadDone


class ReadRounds:
    """One leader's reads awaiting a quorum's acknowledgement and their index.

    Used on the Raft thread only: `begin` when reads arrive, `stamp` for each
    AppendEntries sent, `acknowledged` for each follower's answer, `ready` after each
    tick's apply. A change of term fails what is pending (`abandon`)."""

    def __init__(self) -> None:
        self.term = 0
        self.round = 0
        self._acked: dict[str, int] = {}  # follower -> highest round it acknowledged in `term`
        self._pending: deque[PendingRead] = deque()

    def begin(self, term: int, read_index: int, done: list[ReadDone]) -> None:
        """Start one round for reads that arrived together, all at `read_index` (the
        caller has abandoned what a previous term left pending)."""
        if term != self.term:
            self.term, self._acked = term, {}
        self.round += 1
        self._pending.extend(PendingRead(self.round, read_index, d) for d in done)

    def stamp(self) -> int | None:
        """The round an AppendEntries sent now carries (None: no read is waiting)."""
        return self.round if self._pending else None

    def acknowledged(self, follower: str, term: int, round_: int) -> None:
        if term == self.term and round_ > self._acked.get(follower, 0):
            self._acked[follower] = round_

    def confirmed(self, followers: frozenset[str] | set[str]) -> int:
        """The latest round a majority of the voters (this leader and `followers`) acknowledged."""
        needed = (len(followers) + 1) // 2  # followers' acknowledgements beside the leader's own
        if needed == 0:
            return self.round
        rounds = sorted((self._acked.get(f, 0) for f in followers), reverse=True)
        return rounds[needed - 1]

    def ready(self, followers: frozenset[str] | set[str], applied_index: int) -> list[ReadDone]:
        """Take the reads whose round a majority acknowledged and whose index is applied.
        Later reads have later rounds and no lower index, so they are taken in order."""
        confirmed = self.confirmed(followers)
        out: list[ReadDone] = []
        while self._pending and self._pending[0].round <= confirmed and self._pending[0].index <= applied_index:
            out.append(self._pending.popleft().done)
        return out

    def abandon(self) -> list[ReadDone]:
        """Take every pending read, to be failed: leadership was lost or the term moved."""
        dropped = [p.done for p in self._pending]
        self._pending.clear()
        return dropped

    def __len__(self) -> int:
        return len(self._pending)
