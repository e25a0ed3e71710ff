"""The chaos checker: a history (and the final reads recorded in it) in, a report out.

Pure: it reads the ops and nothing else, so a history file from any run can be
checked again later (`python -m chaos.checker history.jsonl [--json]`), with the
same verdicts as the run. Each invariant lives in its own module under
chaos/invariants; the agent workload's (e.g. token conservation) come in through
`extra`, judged from the history too (chaos.tokens.invariants).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable

from chaos.history import CRASHED, FAULT, NEMESIS, Op, calls, load
from chaos.invariants import (authorization, availability, clocks, collection, convergence, damage, durability,
                              epochs, false_failures, fencing, reads, recovery_completion, recovery_lines, retries)
from chaos.invariants.facts import Facts
from chaos.tokens import invariants as agents
from chaos.report import InvariantResult, Report


def check(ops: Iterable[Op], *, extra: Iterable[InvariantResult] = (),
          serve_bound_s: float = availability.DEFAULT_BOUND_S) -> Report:
    facts = Facts(ops)
    results = [
        durability.check(facts),
        epochs.check_identity(facts),
        epochs.check_monotonic(facts),
        convergence.check(facts),
        recovery_lines.check(facts),
        recovery_completion.check(facts),
        retries.check(facts),
        authorization.check(facts),
        fencing.check(facts),
        availability.check(facts, serve_bound_s),
        collection.check(facts),
        reads.check(facts),
        clocks.check(facts),
        damage.check(facts),
        false_failures.check(facts),
        *extra,
    ]
    return Report(results, _summary(facts))


def _summary(facts: Facts) -> dict[str, object]:
    outcomes = Counter(c.type for c in calls(facts.ops) if c.invoke.process != NEMESIS)
    return {"ops": len(facts.ops), "operations": sum(outcomes.values()), "ok": outcomes["ok"],
            "fail": outcomes["fail"], "info": outcomes["info"],
            "faults": len(facts.nemesis_phase(FAULT)),
            "crashed_processes": sorted({op.process for op in facts.notes(CRASHED)}),
            **_dependency_figures(facts)}


def _dependency_figures(facts: Facts) -> dict[str, object]:
    """How many dependency reports the rollback fences refused as orphans: with the
    senders' generations stamped right, only sends a rollback undid are refused."""
    reports = facts.all("report_deps")
    accepted = sum(1 for r in reports if r.ok)
    orphans = sum(1 for r in reports if not r.ok and any(
        "orphan message" in (c.completion.error or "") for c in r.refusals if c.completion is not None))
    judged = accepted + orphans  # refusals for other reasons (a zombie's incarnation) say nothing here
    return {"dependency_reports": judged, "orphan_refusals": orphans,
            "orphan_refusal_rate": round(orphans / judged, 3) if judged else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description="check a chaos history")
    parser.add_argument("history", type=Path, help="a JSON Lines history")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--serve-bound", type=float, default=availability.DEFAULT_BOUND_S,
                        help="seconds within which a write must be acknowledged after the last heal")
    args = parser.parse_args(argv)
    ops = load(args.history)
    report = check(ops, extra=agents.results(ops), serve_bound_s=args.serve_bound)
    print(report.to_json() if args.json else report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
