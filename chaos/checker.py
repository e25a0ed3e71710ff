"""The chaos checker: a history (and the final reads recorded in it) in, a report out.

Pure: it reads the ops and nothing else, so a history file from any run can be
checked again later (`python -m chaos.checker history.jsonl [--json]`). Each
invariant lives in its own module under chaos/invariants; other workloads add
their own results (e.g. the agent workload's token conservation) through `extra`.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable

from chaos.history import CRASHED, FAULT, NEMESIS, Op, calls, load
from chaos.invariants import (availability, clocks, convergence, damage, durability, epochs, fencing,
                              recovery_lines, retries)
from chaos.invariants.facts import Facts
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
        retries.check(facts),
        fencing.check(facts),
        availability.check(facts, serve_bound_s),
        clocks.check(facts),
        damage.check(facts),
        *extra,
    ]
    return Report(results, _summary(facts))


def _summary(facts: Facts) -> dict[str, object]:
    outcomes = Counter(c.type for c in calls(facts.ops) if c.invoke.process != NEMESIS)
    return {"ops": len(facts.ops), "operations": sum(outcomes.values()), "ok": outcomes["ok"],
            "fail": outcomes["fail"], "info": outcomes["info"],
            "faults": len(facts.nemesis_phase(FAULT)),
            "crashed_processes": sorted({op.process for op in facts.notes(CRASHED)})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description="check a chaos history")
    parser.add_argument("history", type=Path, help="a JSON Lines history")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--serve-bound", type=float, default=availability.DEFAULT_BOUND_S,
                        help="seconds within which a write must be acknowledged after the last heal")
    args = parser.parse_args(argv)
    report = check(load(args.history), serve_bound_s=args.serve_bound)
    print(report.to_json() if args.json else report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
