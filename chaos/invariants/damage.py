"""Invariant: a node whose files were damaged at rest refuses to start, or runs in agreement.

The bit-rot fault flips bytes in a stopped node's journal, store or snapshot and
starts it. Acceptable outcomes: it stopped with EXIT_DAMAGED (refused: it is then
rebuilt from its peers), or -- for the store only -- it is still running: the
flips hit nothing it reads (an old copy on a free page), and replicas-agree holds
it to the same digests as everyone. A snapshot is authenticated whole, and the
flips in a journal land in its durable part (chaos.bitrot), so either must be
refused: running on one is a node that cut committed entries as a torn tail or
installed a changed snapshot. Any other end (a SIGBUS, a traceback, an abort) is
a node that did not know what it was reading. What it served while
running is judged by the other invariants: every acknowledged write still there
(acknowledged-checkpoints-survive), the same content at every index.
"""
from __future__ import annotations

from chaos import bitrot
from chaos.invariants.facts import Facts
from chaos.history import Op
from chaos.report import InvariantResult

NAME = "damaged-nodes-refuse-or-agree"
BIT_ROT_DONE = "bit-rot-flipped"  # nemesis op: {"node", "file", "flipped": {"file", "offsets"} | None}
BIT_ROT_OUTCOME = "bit-rot-outcome"  # nemesis op: {"node", "outcome"}
REFUSED, RUNNING = "refused", "running"
MUST_REFUSE = (bitrot.JOURNAL, bitrot.SNAPSHOT)


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts: dict[str, int] = {}
    damaged: dict[int, Op] = {}  # node -> the latest flip done to it
    for op in facts.nemesis:
        if op.f == BIT_ROT_DONE:
            damaged[op.value["node"]] = op
        if op.f != BIT_ROT_OUTCOME:
            continue
        outcome = op.value["outcome"]
        counts[outcome] = counts.get(outcome, 0) + 1
        flip = damaged.pop(op.value["node"], None)
        what = flip.value["file"] if flip is not None and flip.value["flipped"] else None
        if outcome not in (REFUSED, RUNNING) or (outcome == RUNNING and what in MUST_REFUSE):
            result.violate(f"node {op.value['node']} {outcome} on a damaged {what or 'file'} instead of "
                           "refusing it", flip, op)
    flipped = [op for op in facts.nemesis if op.f == BIT_ROT_DONE]
    result.counts = {"damaged": sum(1 for op in flipped if op.value["flipped"]), **counts}
    return result
