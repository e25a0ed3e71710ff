"""Invariant 8: the cluster serves again soon after the faults heal; availability gaps.

The verdict: the first write acknowledged after the last heal completes within
`bound_s` of that heal (a run with faults but no write acknowledged after its last
heal fails). Reported beside it: the longest interval with no acknowledged write,
and per fault kind the longest gap between acknowledged writes around one of its
injections (e.g. the unavailability a leader kill causes).
"""
from __future__ import annotations

import bisect

from chaos.history import FAULT, HEAL
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from chaos.workloads.metadata_ops import WRITES

NAME = "serves-after-heal"
DEFAULT_BOUND_S = 10.0


def check(facts: Facts, bound_s: float = DEFAULT_BOUND_S) -> InvariantResult:
    result = InvariantResult(NAME, True)
    acked = sorted((c.end, c) for r in facts.all(*WRITES) for c in r.oks)
    ends = [t for t, _ in acked]
    counts: dict[str, object] = {"acknowledged_writes": len(ends), "bound_s": bound_s}
    if len(ends) > 1:
        gap, at = max((b - a, a) for a, b in zip(ends, ends[1:]))
        counts.update(longest_gap_s=gap, longest_gap_at_s=at)
    faults = facts.nemesis_phase(FAULT)
    heals = facts.nemesis_phase(HEAL)
    counts.update(faults=len(faults), heals=len(heals))
    for fault in faults:
        i = bisect.bisect_left(ends, fault.time)
        before = ends[i - 1] if i else 0.0
        after = ends[i] if i < len(ends) else None
        key = f"gap_after_{fault.f}_s"
        if after is not None:
            counts[key] = max(counts.get(key, 0.0), after - before)  # type: ignore[call-overload]
    if heals:
        last = max(heals, key=lambda op: op.time)
        i = bisect.bisect_left(ends, last.time)
        if i == len(ends):
            result.violate(f"no write was acknowledged after the last heal ({last.f} at {last.time:.3f}s)", last)
        else:
            serving = ends[i] - last.time
            counts["serving_after_last_heal_s"] = serving
            if serving > bound_s:
                result.violate(f"first write acknowledged {serving:.3f}s after the last heal (bound {bound_s}s)",
                               last, acked[i][1].completion)
    result.counts = counts
    return result
