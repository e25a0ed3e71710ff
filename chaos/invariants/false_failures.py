"""Invariant: no healthy agent is declared failed (the agent flood's agents).

A leader renews an agent's lease for the group's TTL when it answers the agent's
heartbeat (or registration), at a moment after the agent sent it; a new leader's
takeover grant and the stalled-leader credit only extend leases. So an agent whose
last answered heartbeat was *sent* at s cannot have been declared failed before
s + TTL. Each flood agent (chaos.workloads.flood's `flood-group` notes) is judged at
the earliest time t_f it was seen failed: the first refusal saying its incarnation
is no longer live (at the time that answer came), else its final state read as
FAILED (at the time the read completed). It is a false failure when the latest
answered heartbeat or registration sent before t_f was sent less than TTL before
t_f. An agent silent for a TTL or more (every beat shed or unanswered while the
leader was down) may rightly have failed: excused, and counted.

A heartbeat refused for authorization (UNAUTHENTICATED or PERMISSION_DENIED) counts as
sent by a live agent too, though it renewed nothing: the flood calls as the harness's
admin, whose token and binding no run revokes, so such a refusal is the cluster's
doing (an auth file it stopped honouring while it was broken), not the agent's
silence, and the agent must not be failed for it.

The flood retries a registration with its request id, so a retry is answered with
the same incarnation; only the answered attempt's send time counts as a renewal. A
registered agent missing from a completed final read is a violation too (the
registration was acknowledged). With no flood in the history, it holds with zero counts.
"""
from __future__ import annotations

from typing import Any

from chaos.history import Op
from chaos.invariants.facts import Facts
from chaos.report import InvariantResult
from chaos.workloads.flood import FLOOD_GROUP, FLOOD_RUN

NAME = "no-healthy-agent-declared-failed"


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    registered = answered = denied = failed = excused = false = missing = 0
    for note in facts.notes(FLOOD_GROUP):
        value = note.value
        ttl = float(value["lease_ttl_s"])
        for agent, seen in value["agents"].items():
            registered += 1
            answered += len(seen["beats"])
            denied += len(seen.get("denied", ()))  # histories from before it was recorded have none
            if seen["state"] == "MISSING" and value["read_at"] is not None:
                missing += 1
                result.violate(f"{agent} of {value['group']} registered (acknowledged) but absent from the "
                               f"final read", note)
                continue
            t_f = _failed_at(seen, value["read_at"])
            if t_f is None:
                continue
            failed += 1
            alive = [t for t in (seen["reg"], *seen["beats"], *seen.get("denied", ())) if t is not None and t < t_f]
            last = max(alive, default=None)
            if last is not None and t_f - last < ttl:
                false += 1
                how = f"refused as {seen['refused'][1]}" if seen["refused"] else "read as FAILED"
                result.violate(f"{agent} of {value['group']} {how} at {t_f:.3f}s, {t_f - last:.3f}s after it sent "
                               f"a heartbeat that was answered or refused for authorization (lease TTL {ttl:g}s)",
                               note)
            else:
                excused += 1
    result.counts = {"agents_registered": registered, "heartbeats_answered": answered, "heartbeats_denied": denied,
                     "shed_answers": _shed(facts.notes(FLOOD_RUN)), "failed": failed,
                     "excused_silent": excused, "false_failures": false}
    if missing:
        result.counts["missing"] = missing
    return result


def _failed_at(seen: dict[str, Any], read_at: float | None) -> float | None:
    """The earliest time the agent was seen failed (None: it was not)."""
    if seen["refused"]:
        return seen["refused"][0]
    if seen["state"] == "FAILED" and read_at is not None:
        return read_at
    return None


def _shed(runs: list[Op]) -> int:
    return sum(n for run in runs for key, n in (run.value.get("outcomes") or {}).items() if key.endswith(" SHED"))
