"""The repair fault: a node rebuilt from its peers while the only other copies of
recent writes are down and a stale node is up beside it.

`raftpoint repair --from-peers` (coordinator.replication.rebuild.prepare_rebuild)
empties a node's log. Raft counted that node's acknowledgements toward committing
entries, so the node must not help elect a leader until one has caught its log up.
The sequence that lost acknowledged writes while a repaired node voted at once:

1. the stale followers stop (as many as the cluster can lose: every write now
   needs each remaining node);
2. the workload writes: those entries are held by the leader, the repaired-to-be
   follower and the witnesses (the holders beside them; none with 3 nodes) only;
3. that follower stops and is repaired, the witnesses and the leader are killed:
   the writes are only on nodes that are down;
4. the repaired and the stale nodes start: a majority between them, but without the
   writes. They must elect no leader; the fault is in force once the stale nodes
   had the time for two elections (or elected a leader, which the history records).

Healing starts the leader and the witnesses and waits until the repaired node is
caught up: its term file no longer marks its log lost (it votes again) and it
applied what the leader had committed. So the next fault finds every node voting,
and a cluster that cannot get there in NODE_BACK_S is recorded as such. The
history gets one op per step (REBUILT, WINDOW, HEALED) beside the controller's
stop, kill and start ops; the invariants judge what the clients saw.
"""
from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from chaos.controller import ChaosCluster
from chaos.history import History
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.replication.journal_file import LOG_LOST_KEY
from coordinator.replication.rebuild import prepare_rebuild
from coordinator.storage.protocol import TERM_FILE

log = logging.getLogger(__name__)
T = TypeVar("T")

REBUILT = "repair-rebuilt"  # nemesis op: {"roles", "written", "moved", "kept_vote"}
WINDOW = "repair-window"  # nemesis op: {"nodes", "leader": index | None, "terms": {node: [first, last]}, "seconds"}
HEALED = "repair-healed"  # nemesis op: {"node", "caught_up", "leader", "seconds", "exited": {node: code}}

# Entries the leader applies while the stale nodes are down: a fraction of a second
# of the workload, so the writes the fault is about were acknowledged.
WRITES_WHILE_STALE = 50
WRITES_WAIT_S = 10.0
ELECTIONS = 2  # elections the stale nodes stand in without the writes' holders
NODE_BACK_S = 30.0  # a start reads the store through; a loaded 2-core machine is slow
POLL_S = 0.1


@dataclass(frozen=True)
class Roles:
    leader: int
    repaired: int
    stale: tuple[int, ...]
    witnesses: tuple[int, ...]  # holders of the writes beside the leader and the repaired node

    def to_dict(self) -> dict[str, object]:
        return {"leader": self.leader, "repaired": self.repaired, "stale": list(self.stale),
                "witnesses": list(self.witnesses)}


def roles(leader: int, size: int, rng: random.Random) -> Roles:
    """Who plays what: the holders (leader, repaired, witnesses) are a bare majority, so
    the rest (stale) with the repaired node are one too -- the majority that must not
    elect a leader. An odd cluster size is assumed, as the runner's are."""
    followers = [i for i in range(size) if i != leader]
    rng.shuffle(followers)
    repaired, rest = followers[0], followers[1:]
    stale = size - (size // 2 + 1)
    return Roles(leader, repaired, tuple(sorted(rest[:stale])), tuple(sorted(rest[stale:])))


def log_marked_lost(data_dir: Path) -> bool:
    """Whether the node's term file still says its log was lost (it grants no vote
    and calls no election until that mark is gone: coordinator.replication.rebuild)."""
    try:
        return LOG_LOST_KEY in json.loads((data_dir / TERM_FILE).read_bytes())
    except FileNotFoundError:
        return False


def _until(predicate: Callable[[], T | None], timeout: float, stop: threading.Event | None = None) -> T | None:
    """The predicate's first true value, or None at the deadline (or once `stop` is set)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= end or (stop is not None and stop.is_set()):
            return value
        time.sleep(POLL_S)


@dataclass
class RepairFault:
    """One repair fault on a running cluster: inject(), then heal() (module doc).

    `stop` cuts the injection's waits short when the run ends; heal() then brings
    back whatever the injection took down."""

    cluster: ChaosCluster
    history: History
    roles: Roles
    stop: threading.Event
    down: set[int] = field(default_factory=set)  # nodes this fault took down and did not start again

    # ---- injection --------------------------------------------------------------------
    def inject(self) -> None:
        c, r = self.cluster, self.roles
        for i in r.stale:
            self._take_down(i, c.stop)
        written = self._writes_while_stale()
        self._take_down(r.repaired, c.stop)
        prepared = prepare_rebuild(c.nodes[r.repaired].data_dir)
        for i in (r.leader, *r.witnesses):
            self._take_down(i, c.kill)
        self.history.nemesis(REBUILT, {"roles": r.to_dict(), "written": written, "moved": prepared.moved,
                                       "kept_vote": prepared.kept_vote})
        for i in (r.repaired, *r.stale):
            self._bring_up(i)
        self._window()

    def _take_down(self, i: int, how: Callable[[int], None]) -> None:
        how(i)
        self.down.add(i)

    def _bring_up(self, i: int) -> None:
        self.cluster.start(i)
        self.down.discard(i)

    def _status(self, i: int) -> pb.NodeStatus | None:
        node = self.cluster.nodes[i]
        return node.status() if node.alive else None

    def _writes_while_stale(self) -> int:
        """Entries the leader applied since the stale nodes stopped, once there are
        WRITES_WHILE_STALE (fewer only if the deadline passed: recorded as such)."""
        leader = self.roles.leader
        first = _until(lambda: self._status(leader), WRITES_WAIT_S, self.stop)
        if first is None:
            return 0
        base = first.applied_index

        def written() -> int | None:
            status = self._status(leader)
            done = 0 if status is None else status.applied_index - base
            return done if done >= WRITES_WHILE_STALE else None

        done = _until(written, WRITES_WAIT_S, self.stop)
        status = self._status(leader)
        return done or (0 if status is None else max(0, status.applied_index - base))

    def _window(self) -> None:
        """Wait until the started nodes answer and the stale ones have stood for
        election ELECTIONS times (or one of them leads), and record what was seen."""
        up = (self.roles.repaired, *self.roles.stale)
        first: dict[int, int] = {}
        last: dict[int, pb.NodeStatus] = {}
        started = time.monotonic()

        def decided() -> bool:
            for i in up:
                status = self._status(i)
                if status is not None:
                    last[i] = status
                    first.setdefault(i, status.term)
            if any(s.role == "leader" for s in last.values()):
                return True
            return all(i in last and last[i].term >= first[i] + ELECTIONS for i in self.roles.stale)

        _until(decided, NODE_BACK_S, self.stop)
        leader = next((i for i, s in last.items() if s.role == "leader"), None)
        self.history.nemesis(WINDOW, {"nodes": list(up), "leader": leader,
                                      "terms": {i: [first[i], last[i].term] for i in last},
                                      "seconds": round(time.monotonic() - started, 3)})
        if leader is not None:
            log.warning("node %d was elected leader without the writes' holders (%s)", leader, self.roles)

    # ---- healing ----------------------------------------------------------------------
    def heal(self) -> None:
        """Start what this fault took down; wait until the repaired node is caught up."""
        for i in sorted(self.down):
            self._bring_up(i)
        started = time.monotonic()
        seen: dict[str, object] = {}
        caught_up = bool(_until(lambda: self._caught_up(seen), NODE_BACK_S))
        exited = {i: n.process.poll() for i, n in enumerate(self.cluster.nodes)
                  if n.process is not None and n.process.poll() is not None}
        self.history.nemesis(HEALED, {"node": self.roles.repaired, "caught_up": caught_up,
                                      "leader": seen.get("leader"), "seconds": round(time.monotonic() - started, 3),
                                      "exited": exited})
        if not caught_up:
            log.warning("repaired node %d not caught up %.0fs after the heal (%s); exited: %s",
                        self.roles.repaired, NODE_BACK_S, seen, exited)

    def _caught_up(self, seen: dict[str, object]) -> bool:
        """Every running node answers, one leads, and the repaired node votes again and
        applied what that leader had committed when first seen (`seen` keeps it)."""
        c = self.cluster
        running = {i for i, n in enumerate(c.nodes) if n.alive}
        statuses = c.statuses()
        leaders = {i: s.term for i, s in statuses.items() if s.role == "leader"}
        if set(statuses) != running or not leaders:
            return False
        leader = max(leaders, key=leaders.__getitem__)
        if seen.get("leader") != leader:
            seen.update(leader=leader, commit_index=statuses[leader].commit_index)
        repaired = statuses.get(self.roles.repaired)
        target = int(seen["commit_index"])  # type: ignore[call-overload]
        return (repaired is not None and repaired.applied_index >= target
                and not log_marked_lost(c.nodes[self.roles.repaired].data_dir))
