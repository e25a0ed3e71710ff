"""Invariant 7: stale writes are never acknowledged.

An agent write (CommitCheckpoint, ReportDependencies, AckOrder) is stale when,
before it was first sent:
- a Register of that agent had already answered a higher incarnation; or
- (a coordinated checkpoint) its epoch was already closed: some answer had shown a
  higher current_epoch, a stable_epoch at or above it, or the epoch stable or
  aborted; or
- (a coordinated checkpoint) its epoch cannot have been started by the time it was
  acknowledged, judging by the StartEpoch requests sent until then (when the leader
  starts no epochs itself).
"""
from __future__ import annotations

import bisect

from typing import Callable

from chaos.history import FAIL, OK
from chaos.invariants.facts import TRANSIENT, EarliestAtLeast, Facts, error_code
from chaos.report import InvariantResult

NAME = "stale-writes-refused"
TOKEN_WRITES = ("commit", "report_deps", "ack_order")


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = {"agent_writes_acknowledged": 0, "stale_writes_refused": 0}
    for group in facts.groups:
        superseded = EarliestAtLeast()  # per agent: incarnations up to n known superseded at t
        for r in facts.of(group, "register"):
            if r.ok:
                superseded.saw(r.value["agent"], r.answer["incarnation"] - 1, r.applied_by, r.ok_op)
        closed = EarliestAtLeast()  # epochs up to n known closed at t (an epoch starts only after the last closed)
        for obs in facts.observations(group):
            for upto in ((obs.current or 0) - 1, obs.stable or 0,
                         *(v["epoch"] for v in obs.epochs if v["state"] != "EPOCH_STARTED")):
                if upto > 0:
                    closed.saw(None, upto, obs.end, obs.req.ok_op)
        started_by = None if facts.automatic_epochs(group) else _started_by(facts, group)
        for req in facts.of(group, *TOKEN_WRITES):
            v = req.value
            why, witness = None, None
            known, op = superseded.first_at_least(v["agent"], v["incarnation"])
            if known < req.start:
                why, witness = f"a higher incarnation than {v['incarnation']} had already been registered", op
            elif req.f == "commit" and v.get("kind") == "COORDINATED_CUT":
                known, op = closed.first_at_least(None, v["epoch"])
                if known < req.start:
                    why, witness = f"epoch {v['epoch']} had already closed", op
                elif started_by is not None and v["epoch"] > (newest := started_by(req.applied_by)):
                    why = f"epoch {v['epoch']} cannot have started (at most epoch {newest} by then)"
            if why is None:
                counts["agent_writes_acknowledged"] += req.ok
            elif req.ok:
                result.violate(f"{group}: {req.f} {req.rid} was acknowledged although {why}",
                               witness, req.first.invoke, req.ok_op)
            elif req.refusals:
                counts["stale_writes_refused"] += 1
    result.counts = counts
    return result


def _started_by(facts: Facts, group: str) -> Callable[[float], int]:
    """The newest epoch the group can have started by a time: each StartEpoch send
    starts at most one (a send the client re-sent after a lost answer is applied once,
    the dedupe table answering the re-send); one that was answered reports its epoch,
    one of unknown outcome may have started the next, one refused started none."""
    sends = sorted((c.start, c) for r in facts.of(group, "start_epoch") for c in r.calls
                   if c.type != FAIL or error_code(c.completion) in TRANSIENT)
    times, newest = [t for t, _ in sends], []
    answered = unknown = 0
    for _, c in sends:
        if c.type == OK:
            answered = max(answered, c.completion.value["epoch"]["epoch"])
        else:
            unknown += 1
        newest.append(answered + unknown)
    return lambda t: newest[i - 1] if (i := bisect.bisect_left(times, t)) else 0
