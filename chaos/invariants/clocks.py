"""Invariant: no write is refused because of a node's wall clock.

A leader's clock stepped an hour ahead once pushed the replicated dedupe
watermark an hour ahead, and every honest write was refused as too old to
deduplicate, for good; an hour back, writes were refused as issued too far
ahead of the coordinator's clock. The coordinator ignores such steps
(coordinator.replication.leader_clock), so the documented bound on refusals for
time is zero, and any is a violation. (The workload's clients keep true time.)
"""
from __future__ import annotations

from chaos.history import FAIL, NEMESIS
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult

NAME = "no-refusals-for-time"
# How the coordinator words the two refusals (core.dedupe.admit, transport.proposer).
TIME_REFUSALS = ("too old to deduplicate", "ahead of the coordinator's clock")


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    refused = [op for op in facts.ops if op.type == FAIL and op.process != NEMESIS and op.error
               and any(text in op.error for text in TIME_REFUSALS)]
    for op in refused:
        result.violate(f"{op.f} refused for time: {op.error}", op)
    result.counts = {"refused_for_time": len(refused),
                     "clock_steps": sum(1 for op in facts.nemesis if op.f == "clock-step")}
    return result
