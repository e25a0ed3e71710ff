"""Invariant: garbage collection removes only checkpoints no recovery can need.

GC may delete an agent's checkpoints below its watermark: the recovery line for
"every agent fails now" (no later failure set can go below it), moved down by the
group's `retention` usable checkpoints. The checker recomputes that watermark with
its own naive algorithm on the checkpoints and dependencies the history shows were
stored while the GC ran (recovery_lines.StoredState). Uncertainty only ever lets GC
collect more: the watermark is taken at its highest, from every checkpoint that may
have been usable and only the dependencies surely reported (fewer dependencies and
more checkpoints raise the line). A collected blob at or above it, or one no commit
ever named, is a violation.

A GC whose outcome stayed unknown may have applied at any point after it was first
sent, but not long after its last send (facts.Req.latest_effect). It excuses a
missing checkpoint only if, in that window, the checkpoint could have been below
the watermark.
"""
from __future__ import annotations

from typing import Iterable

from chaos.invariants.facts import INF, Facts, Req
from chaos.invariants.recoveries import recovery_events
from chaos.invariants.recovery_lines import Issued, StoredState, naive_recovery_line
from chaos.report import InvariantResult

NAME = "gc-collects-only-unneeded"


def watermark(state: StoredState, retention: int, t0: float, t1: float) -> dict[str, int]:
    """Per agent, the highest index below which a GC computed at some moment in [t0, t1]
    may have collected."""
    _, maybe, sure_deps, _ = state.bounds(Issued("gc", t0, t1, frozenset(), {}, ()))
    line = naive_recovery_line(maybe, sure_deps, maybe)
    out = {}
    for agent, indexes in maybe.items():
        cps = sorted({0, *indexes})
        position = cps.index(line[agent])  # type: ignore[arg-type]  # every agent failed: a checkpoint
        out[agent] = cps[max(0, position - retention)]
    return out


def retention(facts: Facts, group: str) -> int:
    """The group's retention; 0 (the highest watermark) when the history does not say."""
    return int(facts.spec(group).get("retention", 0))


class Collectable:
    """What each GC of a group may have collected, for the invariants that excuse a
    missing checkpoint by a GC."""

    def __init__(self, facts: Facts, group: str) -> None:
        self.state = StoredState(facts, group, recovery_events(facts, group))
        self.retention = retention(facts, group)
        self._marks: dict[tuple[float, float], dict[str, int]] = {}

    def mark(self, agent: str, t0: float, t1: float) -> int:
        if (t0, t1) not in self._marks:
            self._marks[(t0, t1)] = watermark(self.state, self.retention, t0, t1)
        return self._marks[(t0, t1)].get(agent, 0)

    def below(self, agent: str, index: int, t0: float, t1: float) -> bool:
        return index < self.mark(agent, t0, t1)

    def by_unknown(self, gcs: Iterable[Req], agent: str, index: int, commit: Req, before: float = INF) -> bool:
        """Whether a GC of unknown outcome, started before `before`, may have collected it."""
        for gc in gcs:
            t0, t1 = gc.start, gc.latest_effect
            if t0 < before and commit.start < t1 and self.below(agent, index, t0, t1):
                return True
        return False


def unknown_gcs(facts: Facts, group: str) -> list[Req]:
    return [gc for gc in facts.of(group, "gc") if gc.may_apply and not gc.ok]


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = dict.fromkeys(("gcs_checked", "collected", "collected_needed", "collected_unknown"), 0)
    for group in facts.groups:
        gcs = [gc for gc in facts.of(group, "gc") if gc.ok]
        if not gcs:
            continue
        collectable = Collectable(facts, group)
        commits: dict[str, list[Req]] = {}
        for req in facts.of(group, "commit"):
            commits.setdefault(req.value["blob_uri"], []).append(req)
        for gc in gcs:
            counts["gcs_checked"] += 1
            for uri in gc.answer["uris"]:
                counts["collected"] += 1
                written = [c for c in commits.get(uri, ()) if c.may_apply and c.start < gc.applied_by]
                if not written:
                    counts["collected_unknown"] += 1
                    result.violate(f"{group}: GC collected {uri}, which no commit wrote before it", gc.first.invoke,
                                   gc.ok_op)
                    continue
                agent, index = written[0].value["agent"], written[0].value["index"]
                mark = collectable.mark(agent, gc.start, gc.applied_by)
                if index >= mark:
                    counts["collected_needed"] += 1
                    result.violate(f"{group}/{agent}: GC collected checkpoint {index}, at or above the watermark "
                                   f"{mark} a recovery line or the retention of {collectable.retention} still needs",
                                   written[0].first.invoke, gc.first.invoke, gc.ok_op)
    result.counts = counts
    return result
