"""Invariant: unauthorized writes are refused.

Identities whose role does not allow a write (an agent identity bound to another
group, acting for this group's agents or administering it; an observer writing)
send writes all run long. None may succeed: each definite answer is a refusal
with PERMISSION_DENIED or UNAUTHENTICATED. A refusal is decided before anything is
proposed, so it changes nothing (tests/cluster/test_auth.py checks the digest).
"""
from __future__ import annotations

from chaos.history import OK
from chaos.invariants.facts import Facts, error_code
from chaos.report import InvariantResult

NAME = "unauthorized-writes-refused"
REFUSALS = ("PERMISSION_DENIED", "UNAUTHENTICATED")


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    attempts = refused = 0
    for req in facts.all("intrude"):
        attempts += 1
        for call in req.calls:
            if call.type == OK:
                result.violate(f"{req.value['as']} identity's {req.value['rpc']} on {req.value['target']} succeeded",
                               call.invoke, call.completion)
                break
            if call.completion is not None and error_code(call.completion) in REFUSALS:
                refused += 1
                break
    result.counts = {"attempts": attempts, "refused": refused}
    return result
