"""The agent workload's invariants, judged from the history alone.

The token-passing driver journals every event of each group's ledger (sends,
deliveries, refusals, recovery lines, commits, audits) into the history as
`ledger` notes, opened by a `ledger-open` note and closed by a `ledger-final` one
(what the network still held, whether the final audit ran). Replaying them gives
the same ledger, so the five ledger invariants are judged again here exactly as
the run judged them. What the driver observed outside the coordinator -- zombie
writes refused, checkpoint blobs read back, harness problems -- is recorded as
`agent-result` notes, one per invariant, and read back as recorded.

The workload itself judges through this module (chaos.workloads.agents), so a run's
report and `python -m chaos.checker` on its history give the same verdicts.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from chaos.history import INFO, OK, Op
from chaos.report import InvariantResult
from chaos.tokens.ledger import DUPLICATES, LOST, ORPHANS, RESTORES, TOKENS, Ledger

NAMES = {TOKENS: "agent-tokens-conserved", ORPHANS: "agent-no-orphans",
         LOST: "agent-lost-messages-redelivered-once", DUPLICATES: "agent-duplicates-delivered-once",
         RESTORES: "agent-restores-return-to-savepoint"}
COUNTS = {TOKENS: ("audits",), ORPHANS: ("recoveries", "sends_undone", "orphans_refused"),
          LOST: ("lost_by_rollbacks", "redeliveries"), DUPLICATES: ("deliveries", "duplicates_refused"),
          RESTORES: ("restores", "restores_superseded", "restored_agents")}
ZOMBIES, CHECKPOINTS, WORKLOAD = "agent-zombie-writes-refused", "agent-checkpoints-readable", "agent-workload"
OPEN, EVENT, FINAL, RESULT = "ledger-open", "ledger", "ledger-final", "agent-result"


def _notes(ops: Iterable[Op], f: str) -> list[Op]:
    return [op for op in ops if op.f == f and op.type == INFO and isinstance(op.value, dict)]


def results(ops: Iterable[Op]) -> list[InvariantResult]:
    """Every agent invariant, in the run's order; [] if the agent workload did not run."""
    ops = list(ops)
    opened = _notes(ops, OPEN)
    if not opened:
        return []
    events: dict[str, list[tuple[str, dict[str, Any]]]] = {o.value["group"]: [] for o in opened}
    for op in _notes(ops, EVENT):
        events.setdefault(op.value["group"], []).append((op.value["event"], op.value["args"]))
    finals = {op.value["group"]: op.value for op in _notes(ops, FINAL)}
    sent_ops = {op.value["id"]: op for op in ops
                if op.f == "send" and op.type == OK and isinstance(op.value, dict) and op.value.get("id")}
    judged = []
    for o in opened:
        group = o.value["group"]
        ledger = Ledger.replay(o.value["agents"], o.value["tokens_each"], events[group])
        final = finals.get(group, {})
        judged.append((group, ledger.verdict(final=True, network=final.get("network", ())), final))
    out = []
    for invariant in NAMES:
        result = InvariantResult(NAMES[invariant], True)
        counts: Counter[str] = Counter()
        for group, verdict, _ in judged:
            counts.update(verdict.counts)
            for f in verdict.of(invariant):
                result.violate(f"{group}: {f.why}", *([sent_ops[f.message]] if f.message in sent_ops else []))
        result.counts = {k: counts[k] for k in COUNTS[invariant]}
        out.append(result)
    for group, _, final in judged:
        if not final.get("final_audit"):
            why = "; ".join(final.get("problems", ())) if final else "the run ended before the groups were settled"
            out[0].violate(f"{group}: tokens never audited at the end ({why})")
    recorded = {op.value["name"]: op.value for op in _notes(ops, RESULT)}
    for name in (ZOMBIES, CHECKPOINTS, WORKLOAD):
        value = recorded.get(name)
        result = InvariantResult(name, True, dict(value["counts"]) if value else {})
        if value is None:
            result.violate(f"the history holds no {name} result: the run ended before the agents were judged")
        for why in value["findings"] if value else ():
            result.violate(why)
        out.append(result)
    return out


def recorded_result(result: InvariantResult, findings: Iterable[str]) -> dict[str, Any]:
    """An `agent-result` note's value."""
    return {"name": result.name, "counts": result.counts, "findings": list(findings)}
