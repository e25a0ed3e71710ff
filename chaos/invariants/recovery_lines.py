"""Invariant 5: every recovery line the coordinator issued is consistent and maximal.

Issued lines are the rollback orders of each recovery a re-registration started
(once the history shows all of them, see recoveries.py) and every WhatIf answer.
Each is compared with an independent, deliberately naive algorithm -- repeat full
scans over the dependencies until no orphan remains -- run on the checkpoints and
dependencies the history shows were stored when the line was computed.

Operations of unknown outcome, or overlapping that moment, leave the stored state
uncertain; the check then uses bounds. With fewer usable checkpoints and more
dependencies the maximal line can only be lower, so agent by agent (not rolling
back counting as +infinity)

    naive(surely usable, possibly reported) <= issued <= naive(possibly usable, surely reported)

and the issued line must leave no surely reported dependency orphaned. Without
uncertainty the bounds meet and the line must equal the naive one.

A recovery also counts as failed the agents already failed and those still owing the
acknowledgement of an earlier rollback, and a what-if answers what that recovery would
do. When the history cannot rule such agents out at the what-if's moment, the lower
bound counts every agent as possibly failed (more failed agents only lower the line).
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from chaos.history import Op
from chaos.invariants.facts import INF, Facts, Req
from chaos.invariants.recoveries import Recovery, lease_failures, re_registrations, recovery_events
from chaos.report import InvariantResult

NAME = "recovery-lines-consistent-and-maximal"
Dep = tuple[str, int, str, int, str]  # sender, send interval, receiver, receive interval, message id
Cut = dict[str, int | None]  # None: the agent keeps its current state


def _contains(cut: int | None, interval: int) -> bool:
    return cut is None or interval <= cut


def _rank(cut: int | None) -> float:
    return INF if cut is None else cut


def naive_recovery_line(usable: Mapping[str, Iterable[int]], deps: Iterable[Dep], failed: Iterable[str]) -> Cut:
    """The maximal consistent cut once `failed` lost their state: failed agents start at
    their newest usable checkpoint (0, the initial state, always counts), the others at
    their current state; while a dependency is an orphan (received inside the cut, sent
    outside it), move its receiver back to its last usable checkpoint before the receive."""
    cps = {a: sorted({0, *indexes}) for a, indexes in usable.items()}
    failed = set(failed)
    cut: Cut = {a: (c[-1] if a in failed else None) for a, c in cps.items()}
    known = [d for d in deps if d[0] in cps and d[2] in cps]
    changed = True
    while changed:
        changed = False
        for sender, sent, receiver, received, _ in known:
            if _contains(cut[receiver], received) and not _contains(cut[sender], sent):
                cut[receiver] = max(c for c in cps[receiver] if c < received)
                changed = True
    return cut


def orphans(cut: Mapping[str, int | None], deps: Iterable[Dep]) -> list[Dep]:
    return [d for d in deps if d[0] in cut and d[2] in cut
            and _contains(cut[d[2]], d[3]) and not _contains(cut[d[0]], d[1])]


@dataclass(frozen=True)
class Issued:
    label: str
    t0: float  # the line was computed at some point in [t0, t1]
    t1: float
    failed: frozenset[str]
    line: dict[str, int]
    ops: tuple[Op | None, ...]
    before_recovery: int | None = None  # recoveries from this id on cannot have shaped its input
    # Agents the coordinator may also have counted as failed without their being named:
    # failed ones, and ones still owing the acknowledgement of an earlier rollback.
    may_count_as_failed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Stored:
    """When a write may and surely had taken effect, and the recoveries that might have
    removed what it stored (worked out once: a run checks thousands of lines)."""

    start: float
    applied_by: float
    hits: tuple[tuple[Recovery, bool | None], ...]  # each recovery that does not surely spare it

    @classmethod
    def of(cls, req: Req, recoveries: Iterable[Recovery], affects: Callable[[Recovery], bool | None]) -> "_Stored":
        return cls(req.start, req.applied_by, tuple((r, hit) for r in recoveries if (hit := affects(r)) is not False))

    def removed(self, issued: Issued) -> tuple[bool, bool]:
        """(surely removed before t0, possibly removed before t1) by an earlier recovery."""
        surely = possibly = False
        for r, hit in self.hits:
            if issued.before_recovery is not None and r.id >= issued.before_recovery:
                continue
            surely |= hit is True and r.hi < issued.t0 and self.applied_by < r.lo
            possibly |= r.lo < issued.t1 and self.start < r.hi
        return surely, possibly


class StoredState:
    """The group's stored checkpoints and dependencies as bounds at any moment (also
    what garbage collection and reads are checked against)."""

    def __init__(self, facts: Facts, group: str, recoveries: dict[int, Recovery]) -> None:
        self.recoveries = recoveries
        self.registers = facts.of(group, "register")
        # Sorted by first send: what was first sent after a line was computed cannot have
        # shaped it, so each line looks at a prefix only.
        rs = list(recoveries.values())
        self.cps = sorted(((r.value["agent"], r.value["index"], (r.answer or r.value)["epoch"], r.value["blob_uri"],
                            _Stored.of(r, rs, lambda rec, r=r: checkpoint_hit(rec, r.value["agent"], r.value["index"])))
                           for r in facts.of(group, "commit") if r.may_apply), key=lambda c: c[4].start)
        self.cp_starts = [c[4].start for c in self.cps]
        self.deps = sorted(((dep, _Stored.of(r, rs, lambda rec, dep=dep: _dep_hit(rec, dep)))
                            for r in facts.of(group, "report_deps") if r.may_apply
                            for dep in map(tuple, r.value["deps"])), key=lambda d: d[1].start)
        self.dep_starts = [d[1].start for d in self.deps]
        self.gcs = [g for g in facts.of(group, "gc") if g.may_apply]
        # A blob is removed only by a GC that listed it or whose answer is unknown (and
        # that may have applied after the blob's commit was sent).
        self.gcs_listing: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for gc in self.gcs:
            for uri in gc.answer["uris"] if gc.ok else ():
                self.gcs_listing[uri].append((gc.start, gc.applied_by))
        self.gcs_unknown = [(g.start, g.latest_effect) for g in self.gcs if not g.ok]
        self.coordinated = facts.spec(group).get("mode") == "COORDINATED"
        self.stable_at: dict[int, float] = {}
        self.aborted: set[int] = set()
        self.open_seen: dict[int, float] = defaultdict(lambda: -INF)  # latest start of a read showing it open
        for obs in facts.observations(group):
            if obs.stable:
                self.stable_at[obs.stable] = min(self.stable_at.get(obs.stable, INF), obs.end)
            for view in obs.epochs:
                e = view["epoch"]
                if view["state"] == "EPOCH_STABLE":
                    self.stable_at[e] = min(self.stable_at.get(e, INF), obs.end)
                elif view["state"] == "EPOCH_ABORTED":
                    self.aborted.add(e)
                elif view["state"] == "EPOCH_STARTED":
                    self.open_seen[e] = max(self.open_seen[e], obs.start)

    def bounds(self, issued: Issued) -> tuple[dict[str, set[int]], dict[str, set[int]], list[Dep], list[Dep]]:
        """(surely usable, possibly usable, surely reported, possibly reported) for the moment
        the line was computed."""
        t0, t1 = issued.t0, issued.t1
        agents = {r.value["agent"] for r in self.registers if r.may_apply and r.start < t1}
        sure: dict[str, set[int]] = {a: set() for a in agents}
        maybe: dict[str, set[int]] = {a: set() for a in agents}
        unknown_gcs = [(start, until) for start, until in self.gcs_unknown if start < t1]
        for agent, index, epoch, uri, cp in self.cps[:bisect.bisect_left(self.cp_starts, t1)]:
            if agent not in agents:
                continue
            gone = may_be_gone = False
            for gc_start, gc_end in self.gcs_listing.get(uri, ()):
                gone |= gc_end < t0 and cp.applied_by < gc_start
                may_be_gone |= gc_start < t1 and cp.start < gc_end
            if gone:
                continue  # collected before the line was computed: in neither bound
            surely, possibly = cp.removed(issued)
            gone, may_be_gone = gone or surely, may_be_gone or possibly
            may_be_gone |= any(cp.start < until for _, until in unknown_gcs)
            stable_sure = not self.coordinated or self.stable_at.get(epoch, INF) < t0
            stable_maybe = not self.coordinated or (epoch not in self.aborted and self.open_seen[epoch] <= t1)
            if cp.applied_by < t0 and stable_sure and not may_be_gone:
                sure[agent].add(index)
            if cp.start < t1 and stable_maybe and not gone:
                maybe[agent].add(index)
        sure_deps, maybe_deps = [], []
        for dep, item in self.deps[:bisect.bisect_left(self.dep_starts, t1)]:
            gone, may_be_gone = item.removed(issued)
            if item.applied_by < t0 and not may_be_gone:
                sure_deps.append(dep)
            if item.start < t1 and not gone:
                maybe_deps.append(dep)
        return sure, maybe, sure_deps, maybe_deps


def checkpoint_hit(r: Recovery, agent: str, index: int) -> bool | None:
    if agent in r.line:
        return index > r.line[agent]
    return False if r.complete else None


def _dep_hit(r: Recovery, dep: Dep) -> bool | None:
    sender, sent, receiver, received, _ = dep
    if (receiver in r.line and received > r.line[receiver]) or (sender in r.line and sent > r.line[sender]):
        return True
    return False if r.complete or (receiver in r.line and sender in r.line) else None


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = dict.fromkeys(("recoveries", "recoveries_checked", "recoveries_unchecked", "what_ifs_checked",
                            "exact", "bounded", "multi_agent"), 0)
    for group in facts.groups:
        recoveries = recovery_events(facts, group)
        state = StoredState(facts, group, recoveries)
        for issued in _issued_lines(facts, group, recoveries, result, counts):
            _check_line(state, issued, result, counts)
    result.counts = counts
    return result


def _issued_lines(facts: Facts, group: str, recoveries: dict[int, Recovery], result: InvariantResult,
                  counts: dict[str, int]) -> list[Issued]:
    out = []
    for r in sorted(recoveries.values(), key=lambda r: r.id):
        counts["recoveries"] += 1
        for first, second in r.conflicts:
            result.violate(f"{group} recovery {r.id} ordered {first.agent} back to both {first.checkpoint_index} "
                           f"and {second.checkpoint_index}", first.seen.ok_op, second.seen.ok_op)
        if r.cause is None or not r.complete or r.failed is None:
            counts["recoveries_unchecked"] += 1
            continue
        counts["recoveries_checked"] += 1
        out.append(Issued(f"{group} recovery {r.id} (re-registration of {sorted(r.failed)})", r.lo, r.hi,
                           r.failed, r.line, (r.cause.first.invoke, r.cause.ok_op), r.id))
    everyone = frozenset(r.value["agent"] for r in facts.of(group, "register"))
    for w in facts.of(group, "what_if"):
        if w.ok:
            counts["what_ifs_checked"] += 1
            unsettled = everyone if _may_be_unsettled(facts, group, w.start, w.applied_by) else frozenset()
            out.append(Issued(f"{group} what-if {w.value['failed']} fail", w.start, w.applied_by,
                               frozenset(w.value["failed"]), dict(w.answer["targets"]), (w.first.invoke, w.ok_op),
                               may_count_as_failed=unsettled))
    return out


def _may_be_unsettled(facts: Facts, group: str, t0: float, t1: float) -> bool:
    """Whether some agent may have been failed, or have owed the acknowledgement of a
    rollback, at some moment in [t0, t1]. A recovery counts such agents as failed, and a
    what-if answers what the recovery would do. Settled: no lease failure was ever seen,
    and every re-registration that may have applied before t1 was followed by a read,
    started after it certainly applied and answered before t0, showing the group RUNNING."""
    if lease_failures(facts, group):
        return True
    running = [o.start for o in facts.observations(group) if o.state == "RUNNING" and o.end < t0]
    return any(not any(start > req.applied_by for start in running)
               for req in re_registrations(facts, group) if req.may_apply and req.start < t1)


def _check_line(state: StoredState, issued: Issued, result: InvariantResult, counts: dict[str, int]) -> None:
    sure, maybe, sure_deps, maybe_deps = state.bounds(issued)
    lower = naive_recovery_line(sure, maybe_deps, issued.failed | issued.may_count_as_failed)
    upper = naive_recovery_line(maybe, sure_deps, issued.failed)
    counts["exact" if lower == upper else "bounded"] += 1
    # A line that rolls back an agent beyond the failed ones exercises the dependency
    # graph; one that rolls back only the failed agents would hold with no dependencies.
    counts["multi_agent"] += bool(set(issued.line) - issued.failed)
    line: Cut = {a: issued.line.get(a) for a in maybe}
    unknown = sorted(set(issued.line) - set(maybe))
    if unknown:
        result.violate(f"{issued.label}: rolls back agents the group does not have: {unknown}", *issued.ops)
    for a in sorted(issued.failed & set(maybe)):
        if line[a] is None:
            result.violate(f"{issued.label}: failed agent {a} is not rolled back", *issued.ops)
    for a in sorted(maybe):
        if not _rank(lower[a]) <= _rank(line[a]) <= _rank(upper[a]):
            what = "further back than needed (not maximal)" if _rank(line[a]) < _rank(lower[a]) else \
                "not far enough back (keeps an orphan)"
            result.violate(f"{issued.label}: {a} -> {line[a]}, {what}; the naive line gives "
                           f"{_span(lower[a], upper[a])} on the stored checkpoints and dependencies", *issued.ops)
        elif line[a] not in (None, 0) and line[a] not in maybe[a]:
            result.violate(f"{issued.label}: {a} -> {line[a]}, a checkpoint that was not stored and usable",
                           *issued.ops)
    for dep in orphans(line, sure_deps)[:1]:
        result.violate(f"{issued.label}: message {dep[4]} ({dep[0]}@{dep[1]} -> {dep[2]}@{dep[3]}) is an orphan "
                       f"of the line {issued.line}", *issued.ops)


def _span(low: int | None, high: int | None) -> str:
    return str(low) if low == high else f"between {low} and {high}"
