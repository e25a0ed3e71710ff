"""Invariant 1: every acknowledged checkpoint is still listed at the end, unchanged.

Two things may legitimately remove one, and both must be visible in the history:
an acknowledged GarbageCollect that listed its blob URI, or a rollback order of
its agent to a lower index from a recovery that did not certainly happen before
the checkpoint was first sent. A GarbageCollect of unknown outcome excuses only
what it could have collected in the window it may have applied in (collection.py):
those are counted apart ("possibly_collected"). The final state is the last
ListCheckpoints answered for the group (a "not found" answer lists nothing: the
whole group was lost).
"""
from __future__ import annotations

from chaos.invariants.collection import Collectable, unknown_gcs
from chaos.invariants.facts import Facts
from chaos.invariants.recoveries import rollback_orders, recovery_known_by
from chaos.report import InvariantResult

NAME = "acknowledged-checkpoints-survive"


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = dict.fromkeys(("acknowledged", "present", "collected", "rolled_back", "possibly_collected",
                            "missing", "changed"), 0)
    for group in facts.groups:
        acked = [r for r in facts.of(group, "commit") if r.ok]
        counts["acknowledged"] += len(acked)
        if not acked:
            continue
        final = facts.final_listing(group)
        if final is None:
            result.violate(f"group {group}: {len(acked)} acknowledged checkpoints but no final ListCheckpoints")
            counts["missing"] += len(acked)
            continue
        final_op, entries = final
        listed = {(c["agent"], c["index"]): c for c in entries}
        gcs = facts.of(group, "gc")
        collected = {uri for gc in gcs for c in gc.oks for uri in c.completion.value["uris"]}
        unknown_gc = unknown_gcs(facts, group)
        collectable = Collectable(facts, group) if unknown_gc else None
        orders = rollback_orders(facts, group)
        known_by = recovery_known_by(facts, group)
        for req in acked:
            v = req.answer
            agent, index = req.value["agent"], v["index"]
            found = listed.get((agent, index))
            if found is not None:
                if (found["blob_uri"], found["sha256"]) == (v["blob_uri"], v["sha256"]):
                    counts["present"] += 1
                else:
                    counts["changed"] += 1
                    result.violate(f"{group}/{agent} checkpoint {index} acknowledged with {v['sha256'][:12]} but "
                                   f"listed with {found['sha256'][:12]}", req.first.invoke, req.ok_op,
                                   final_op)
            elif v["blob_uri"] in collected:
                counts["collected"] += 1
            elif any(o.agent == agent and o.checkpoint_index < index and known_by.first_at_least(None, o.recovery_id)[0] >= req.start
                     for o in orders):
                counts["rolled_back"] += 1
            elif collectable is not None and collectable.by_unknown(unknown_gc, agent, index, req):
                counts["possibly_collected"] += 1
            else:
                counts["missing"] += 1
                result.violate(f"{group}/{agent} checkpoint {index} was acknowledged and is gone (no GC listed it, "
                               f"no rollback below it)", req.first.invoke, req.ok_op, final_op)
    result.counts = counts
    return result
