"""Invariant 6: a retried request is applied once.

- Every definite answer to one request id is the same answer (ok with the same
  value, or the same refusal): a retry is answered from the dedupe table.
- Non-idempotent effects happen once per request id: no two Register requests of
  an agent get the same incarnation, the agent's final incarnation is not above
  the number of its Register requests that may have applied, (when the leader
  starts no epochs itself) the group's final current_epoch is not above the number
  of its StartEpoch requests that may have applied, and an acknowledged checkpoint
  still listed at the end carries the stamp (created_at) of its acknowledgement.
"""
from __future__ import annotations

from collections import defaultdict

from chaos.history import OK, Call
from chaos.invariants.facts import TRANSIENT, Facts, error_code
from chaos.report import InvariantResult

NAME = "retries-apply-once"


def _answer(call: Call) -> tuple:
    done = call.completion
    assert done is not None
    return (OK, repr(sorted(done.value.items())) if isinstance(done.value, dict) else repr(done.value)) \
        if done.type == OK else (done.type, done.error)


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    retried = 0
    for req in facts.reqs.values():
        definite = [c for c in req.calls if c.type == OK or
                    (c.completion is not None and c.type == "fail" and error_code(c.completion) not in TRANSIENT)]
        if len(req.calls) > 1:
            retried += 1
        for call in definite[1:]:
            if _answer(call) != _answer(definite[0]):
                result.violate(f"request {req.rid} ({req.f}) was answered differently when sent again",
                               definite[0].invoke, definite[0].completion, call.invoke, call.completion)
                break
    for group in facts.groups:
        _registrations(facts, group, result)
        _epochs_started(facts, group, result)
        _checkpoints_stored_once(facts, group, result)
    result.counts = {"requests": len(facts.reqs), "requests_sent_again": retried}
    return result


def _registrations(facts: Facts, group: str, result: InvariantResult) -> None:
    registers = facts.of(group, "register")
    by_incarnation: dict[tuple[str, int], list] = defaultdict(list)
    for req in registers:
        if req.ok:
            by_incarnation[(req.value["agent"], req.answer["incarnation"])].append(req)
    for (agent, incarnation), reqs in sorted(by_incarnation.items()):
        if len(reqs) > 1:
            result.violate(f"{group}/{agent}: incarnation {incarnation} was given to {len(reqs)} registrations",
                           *(r.ok_op for r in reqs[:3]))
    final = facts.last_ok(group, "get_group")
    if final is None:
        return
    for agent, seen in final.answer["agents"].items():
        possible = [r for r in registers if r.value["agent"] == agent and r.may_apply and r.start < final.applied_by]
        if seen["incarnation"] > len(possible):
            result.violate(f"{group}/{agent} is at incarnation {seen['incarnation']} after only {len(possible)} "
                           f"registration requests", final.ok_op, *(r.first.invoke for r in possible[:2]))


def _epochs_started(facts: Facts, group: str, result: InvariantResult) -> None:
    final = facts.last_ok(group, "get_group")
    if final is None or facts.automatic_epochs(group):
        return
    starts = [r for r in facts.of(group, "start_epoch") if r.may_apply and r.start < final.applied_by]
    if final.answer["current_epoch"] > len(starts):
        result.violate(f"{group} is at epoch {final.answer['current_epoch']} after only {len(starts)} StartEpoch "
                       f"requests", final.ok_op, *(r.first.invoke for r in starts[:2]))


def _checkpoints_stored_once(facts: Facts, group: str, result: InvariantResult) -> None:
    """A checkpoint is stamped when it is applied: if the final listing shows an acknowledged
    request's checkpoint with another stamp, the request was applied again (e.g. re-created
    after a rollback removed it)."""
    final = facts.final_listing(group)
    if final is None:
        return
    final_op, entries = final
    listed = {c["blob_uri"]: c for c in entries}
    for req in facts.of(group, "commit"):
        found = listed.get(req.answer["blob_uri"]) if req.ok else None
        if found is not None and found.get("created_at", req.answer["created_at"]) != req.answer["created_at"]:
            result.violate(f"{group}/{req.value['agent']} checkpoint {req.answer['index']} was stored again after "
                           f"it was acknowledged", req.ok_op, final_op)
