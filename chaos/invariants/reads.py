"""Invariant: every successful read reflects the writes acknowledged before it began.

Linearizable reads of checkpoints and agents, checked read by read:

- ListCheckpoints: every checkpoint whose commit was acknowledged before the read
  was sent is listed, unless something may have removed it before the read was
  answered (a GC that listed it or may have collected it, a recovery that rolled
  its agent back below it); and every listed checkpoint was written by a commit
  sent before the read was answered, with the same digest.
- GetGroup: no agent shows an incarnation older than one a registration
  acknowledged before the read was sent.
- WhatIf answers name only checkpoints that were stored (checked with their lines
  in recovery_lines).

Epoch counters are checked read against read in epochs.py.
"""
from __future__ import annotations

from chaos.invariants.collection import Collectable, unknown_gcs
from chaos.invariants.facts import Facts, Req
from chaos.invariants.recoveries import Recovery, recovery_events
from chaos.invariants.recovery_lines import checkpoint_hit
from chaos.report import InvariantResult

NAME = "reads-reflect-acknowledged-writes"


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = dict.fromkeys(("listings_checked", "group_reads_checked", "missing", "never_written", "stale_agent"), 0)
    for group in facts.groups:
        _check_listings(facts, group, result, counts)
        _check_group_reads(facts, group, result, counts)
    counts["what_ifs_checked"] = sum(1 for w in facts.all("what_if") if w.ok)
    result.counts = counts
    return result


class _Removals:
    """What may have removed an acknowledged checkpoint before a moment."""

    def __init__(self, facts: Facts, group: str) -> None:
        self.collected: dict[str, list[Req]] = {}
        for gc in facts.of(group, "gc"):
            for uri in gc.answer["uris"] if gc.ok else ():
                self.collected.setdefault(uri, []).append(gc)
        self.unknown = unknown_gcs(facts, group)
        self.collectable = Collectable(facts, group) if self.unknown else None
        self.recoveries: list[Recovery] = list(recovery_events(facts, group).values())

    def possibly_before(self, commit: Req, t: float) -> bool:
        agent, index, uri = commit.value["agent"], commit.value["index"], commit.value["blob_uri"]
        if any(gc.start < t for gc in self.collected.get(uri, ())):
            return True
        if any(r.lo < t and commit.start < r.hi and checkpoint_hit(r, agent, index) is not False
               for r in self.recoveries):
            return True
        return self.collectable is not None and self.collectable.by_unknown(self.unknown, agent, index, commit, t)


def _check_listings(facts: Facts, group: str, result: InvariantResult, counts: dict[str, int]) -> None:
    reads = [r for r in facts.of(group, "list_checkpoints") if r.ok]
    if not reads:
        return
    commits = facts.of(group, "commit")
    written = {c.value["blob_uri"]: c for c in commits if c.may_apply}
    acked = sorted((c for c in commits if c.ok), key=lambda c: c.applied_by)
    removals = _Removals(facts, group)
    for read in reads:
        counts["listings_checked"] += 1
        listed = {entry["blob_uri"]: entry for entry in read.answer["checkpoints"]}
        for uri, entry in listed.items():
            source = written.get(uri)
            if source is None or source.start > read.applied_by or entry["sha256"] != source.value["sha256"]:
                counts["never_written"] += 1
                result.violate(f"{group}/{entry['agent']}: a read lists checkpoint {entry['index']} ({uri}), which no "
                               f"commit sent before it wrote", read.first.invoke, read.ok_op)
        for commit in acked:
            if commit.applied_by >= read.start:
                break
            if commit.value["blob_uri"] not in listed and not removals.possibly_before(commit, read.applied_by):
                counts["missing"] += 1
                result.violate(f"{group}/{commit.value['agent']}: checkpoint {commit.value['index']} was acknowledged "
                               f"before a read that does not list it (no GC or rollback could have removed it)",
                               commit.first.invoke, commit.ok_op, read.first.invoke, read.ok_op)


def _check_group_reads(facts: Facts, group: str, result: InvariantResult, counts: dict[str, int]) -> None:
    registered = sorted((r for r in facts.of(group, "register") if r.ok), key=lambda r: r.applied_by)
    for read in (r for r in facts.of(group, "get_group") if r.ok):
        counts["group_reads_checked"] += 1
        agents = read.answer["agents"]
        for reg in registered:
            if reg.applied_by >= read.start:
                break
            shown = agents.get(reg.value["agent"])
            if shown is None or shown["incarnation"] < reg.answer["incarnation"]:
                counts["stale_agent"] += 1
                result.violate(f"{group}/{reg.value['agent']}: incarnation {reg.answer['incarnation']} was "
                               f"acknowledged before a read that shows "
                               f"{'no such agent' if shown is None else shown['incarnation']}",
                               reg.ok_op, read.first.invoke, read.ok_op)
