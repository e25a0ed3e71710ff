"""Invariant 4: replicas agree on the content of every applied index, and converge.

Node samples (chaos.sampler) pair an applied index with the content digest read in
the same store transaction; two samples of one index with different digests mean
two replicas applied the same log prefix differently. After the faults heal, the
final sample must show every node at the same index with the same digest.
"""
from __future__ import annotations

from collections import defaultdict

from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from chaos.sampler import FINAL, SAMPLE, converged, disagreements

NAME = "replicas-agree"


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    nodes_at: dict[int, set[str | None]] = defaultdict(set)
    samples = facts.notes(SAMPLE)
    for op in samples:
        nodes_at[op.value["digest_index"]].add(op.node)
    for earlier, op in disagreements(samples, lambda op: op.value):
        result.violate(f"index {op.value['digest_index']}: {earlier.node} holds "
                       f"{earlier.value['content_digest'][:12]}, {op.node} holds {op.value['content_digest'][:12]}",
                       earlier, op)
    finals = facts.notes(FINAL)
    if not finals:
        result.violate("no final sample: convergence after healing was not checked")
    else:
        final = finals[-1]
        if not final.value["converged"] or not converged(final.value["nodes"]):
            result.violate(f"nodes did not converge after healing: {_describe(final.value['nodes'])}", final)
    result.counts = {"samples": len(samples), "indexes_sampled": len(nodes_at),
                     "indexes_on_several_nodes": sum(1 for nodes in nodes_at.values() if len(nodes) > 1)}
    return result


def _describe(nodes: dict) -> str:
    return ", ".join(f"{node}: " + (f"{s['digest_index']}/{s['content_digest'][:12]}" if s else "no answer")
                     for node, s in sorted(nodes.items()))
