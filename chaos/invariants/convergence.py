"""Invariant 4: replicas agree on the content of every applied index, and converge.

Node samples (chaos.sampler) pair an applied index with the content digest read in
the same store transaction; two samples of one index with different digests mean
two replicas applied the same log prefix differently. After the faults heal, the
final sample must show every node at the same index with the same digest.
"""
from __future__ import annotations

from collections import defaultdict

from chaos.history import Op
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from chaos.sampler import FINAL, SAMPLE

NAME = "replicas-agree"


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    first_at: dict[int, Op] = {}
    nodes_at: dict[int, set[str | None]] = defaultdict(set)
    samples = facts.notes(SAMPLE)
    for op in samples:
        index, digest = op.value["digest_index"], op.value["content_digest"]
        earlier = first_at.setdefault(index, op)
        nodes_at[index].add(op.node)
        if earlier.value["content_digest"] != digest:
            result.violate(f"index {index}: {earlier.node} holds {earlier.value['content_digest'][:12]}, "
                           f"{op.node} holds {digest[:12]}", earlier, op)
    finals = facts.notes(FINAL)
    if not finals:
        result.violate("no final sample: convergence after healing was not checked")
    else:
        final = finals[-1]
        nodes = final.value["nodes"]
        pairs = {(s["digest_index"], s["content_digest"]) if s else None for s in nodes.values()}
        if not final.value["converged"] or len(pairs) != 1 or None in pairs:
            result.violate(f"nodes did not converge after healing: {_describe(nodes)}", final)
    result.counts = {"samples": len(samples), "indexes_sampled": len(first_at),
                     "indexes_on_several_nodes": sum(1 for nodes in nodes_at.values() if len(nodes) > 1)}
    return result


def _describe(nodes: dict) -> str:
    return ", ".join(f"{node}: " + (f"{s['digest_index']}/{s['content_digest'][:12]}" if s else "no answer")
                     for node, s in sorted(nodes.items()))
