"""Raft events and membership changes as structured log lines and counters.

A cluster broken by membership changes once left no trace: six members, three
alive, terms rising, and not one line saying who had been added. Every event here
is one JSON line (logger "raftpoint.raft", event "raft.<kind>", with the node and
the event's fields) and one increment of a counter labelled by its kind, so both
a reader of the log and an alert on rate() see it.
"""
from __future__ import annotations

from typing import Any

import structlog

from coordinator.core.membership import RaftEvent
from coordinator.observability import metrics
from coordinator.observability.log_tally import LogTally

log = structlog.get_logger("raftpoint.raft")
# A stranger can open thousands of Raft connections a second: their refusals are
# counted each, and logged as one line per interval.
_REFUSALS = LogTally(log.warning, "raft.connections_refused")
# A frame refused on an authenticated connection is forged, tampered or a bug: as rare
# as it should be, a flood of them must not flood the log either.
_FRAMES_REFUSED = LogTally(log.warning, "raft.frames_refused")

# Routine events are info; the ones an operator should look at are warnings. A lost
# election is info: a node waiting to be added loses one every election timeout.
_WARN = frozenset({"stepped_down", "member_added", "member_removed"})


def record(event: RaftEvent, **context: object) -> None:
    """Log and count one Raft event seen by this node."""
    metrics.RAFT_EVENTS.labels(event.kind).inc()
    emit = log.warning if event.kind in _WARN else log.info
    emit(f"raft.{event.kind}", **context, **dict(event.fields))


def membership_request(action: str, node: str, outcome: str, **fields: object) -> None:
    """Log and count one AddNode/RemoveNode call: `outcome` is "done" or why it was refused."""
    metrics.MEMBERSHIP_REQUESTS.labels(action, outcome).inc()
    log.warning("raft.membership_request", action=action, member=node, outcome=outcome, **fields)


def connection_refused(reason: str, detail: str) -> None:
    """Count one incoming Raft connection closed before it authenticated, and log it
    (rate-limited); `detail` says what it did."""
    metrics.RAFT_CONNECTIONS_REFUSED.labels(reason).inc()
    _REFUSALS.note(reason, f"closed an incoming Raft connection that {detail}")


def frame_refused(reason: str, detail: str) -> None:
    """Count one connection closed for a frame that must not be read, and log it
    (rate-limited): `reason` is the counter's label, `detail` says what the frame was."""
    metrics.RAFT_FRAMES_REFUSED.labels(reason).inc()
    _FRAMES_REFUSED.note(reason, detail)


_SENT: dict[tuple[str, str], Any] = {}


def message_sent(kind: str, framing: str) -> None:
    """Count one Raft message sent (on the Raft thread, for every message: the
    counter's child is looked up once per label pair)."""
    child = _SENT.get((kind, framing))
    if child is None:
        child = _SENT[(kind, framing)] = metrics.RAFT_MESSAGES_SENT.labels(kind, framing)
    child.inc()


def tick() -> None:
    """Count one run of the Raft thread's tick."""
    metrics.RAFT_TICKS.inc()


def flush() -> None:
    """Write the refusals (of connections and of frames) counted since the last line once its interval is over (every Raft tick)."""
    _REFUSALS.flush()
    _FRAMES_REFUSED.flush()
