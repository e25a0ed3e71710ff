"""The dedupe table's pure rules: a monotone clock and watermark, and what they admit;
whose request ids an entry's id is among, and which command an answer answers."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from coordinator.core import commands as c
from coordinator.core import dedupe
from coordinator.core.authz import Grant, Role
from coordinator.core.dedupe import DedupeClock
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.model import Checkpoint, CheckpointKind


def test_clock_and_watermark_never_go_back() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert (c.clock_ms, c.watermark_ms) == (1_000_000, 940_000)
    behind = dedupe.advance(c, 900.0, 60.0)  # a new leader whose clock is behind
    assert behind == c
    narrower_then_wider = dedupe.advance(dedupe.advance(c, 1000.0, 10.0), 1001.0, 600.0)
    assert narrower_then_wider.watermark_ms == 990_000  # a wider window later never lowers it
    assert dedupe.advance(c, 2000.0, 0.0).watermark_ms == c.watermark_ms  # no window: no forgetting
    assert dedupe.advance(c, float("nan"), 60.0) == c


def test_admit_refuses_requests_older_than_the_watermark() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.admit(c, 940_000, 60.0) is None  # exactly at the watermark: still remembered
    refusal = dedupe.admit(c, 939_999, 60.0)
    assert refusal is not None and refusal.code is Code.FAILED_PRECONDITION
    assert "too old to deduplicate" in refusal.reason and refusal.field == "issued_at"


def test_admit_refuses_requests_from_far_in_the_future() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.admit(c, 1_060_000, 60.0) is None
    refusal = dedupe.admit(c, 1_060_001, 60.0)
    assert refusal is not None and refusal.code is Code.INVALID_ARGUMENT and refusal.field == "issued_at"


def test_only_what_the_watermark_passed_is_forgettable() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.forgettable(c, 939_999) and not dedupe.forgettable(c, 940_000)


def test_a_forgotten_request_is_always_refused() -> None:
    """Whatever the sequence of proposal times and windows: once the watermark has
    passed a request (so its answer may be forgotten), that request is refused."""
    import random

    rng = random.Random(7)
    clock = DedupeClock()
    issued = 500_000
    forgotten_at = None
    for step in range(2000):
        clock = dedupe.advance(clock, rng.uniform(0, 2000), rng.choice([0.0, 10.0, 60.0, 600.0]))
        if forgotten_at is None and dedupe.forgettable(clock, issued):
            forgotten_at = step
        if forgotten_at is not None:
            assert dedupe.admit(clock, issued, 600.0) is not None
    assert forgotten_at is not None


def test_pruning_outpaces_recording() -> None:
    assert dedupe.prune_budget(0) >= 1
    assert all(dedupe.prune_budget(n) > n for n in (1, 10, 256))


# ---- whose answer, to which command --------------------------------------------

def _checkpoint(epoch: int = 0) -> c.CommitCheckpoint:
    return c.CommitCheckpoint(c.Token(1, epoch, "ab" * 32), Checkpoint(
        "g", "a", 3, epoch, CheckpointKind.BASIC, "file:///b/3", "c" * 64, 10, dependency_versions={"lib": "1"}))


def test_a_fingerprint_is_the_same_for_the_same_command_and_only_for_it() -> None:
    assert dedupe.fingerprint(_checkpoint()) == dedupe.fingerprint(_checkpoint())
    assert dedupe.fingerprint(_checkpoint()) != dedupe.fingerprint(_checkpoint(epoch=1))
    assert dedupe.fingerprint(c.Register("g", "a", "01" * 32)) != dedupe.fingerprint(c.Register("g", "a", "02" * 32))
    # Commands of other kinds with the same fields are other commands.
    assert dedupe.fingerprint(c.StartEpoch("g")) != dedupe.fingerprint(c.GarbageCollect("g"))
    # Kept in the replicated table and compared by every replica, before and after a
    # restart: the canonical form is fixed, so its value is too.
    assert dedupe.fingerprint(c.StartEpoch("g")) == hashlib.sha256(b'["StartEpoch",{"group":"g"}]').hexdigest()


@dataclass(frozen=True)
class Register:
    """c.Register as a later version might have it, with one more field."""

    group: str
    agent_id: str
    secret_hash: str = ""
    labels: tuple[str, ...] = ()


def test_a_field_added_with_a_zero_default_keeps_the_fingerprint() -> None:
    assert dedupe.fingerprint(Register("g", "a", "01" * 32)) == dedupe.fingerprint(c.Register("g", "a", "01" * 32))
    assert dedupe.fingerprint(Register("g", "a", "01" * 32, ("x",))) != dedupe.fingerprint(
        c.Register("g", "a", "01" * 32))


def test_each_identity_has_its_own_request_ids_and_unauthenticated_entries_share_one_set() -> None:
    assert dedupe.namespace(Grant("w1", Role.AGENT, "g", "a*")) == "w1"
    assert dedupe.namespace(Grant("w1", Role.ADMIN)) == "w1"  # a changed binding keeps the identity's ids
    assert dedupe.namespace(None) == ""


def test_a_remembered_answer_answers_only_the_command_it_answered() -> None:
    fingerprint = dedupe.fingerprint(_checkpoint())
    assert dedupe.reuse("cp-3", fingerprint, fingerprint) is None
    refusal = dedupe.reuse("cp-3", fingerprint, dedupe.fingerprint(_checkpoint(epoch=1)))
    assert refusal is not None
    assert (refusal.code, refusal.reason_code, refusal.field) == (
        Code.ALREADY_EXISTS, ReasonCode.REQUEST_ID_REUSED, "request_id")
    assert dedupe.unattributed("cp-3").reason_code is ReasonCode.REQUEST_ID_REUSED


def test_answers_of_the_earlier_version_are_looked_up_until_the_queue_passes_them() -> None:
    upgraded = dedupe.attributing(DedupeClock(head=3, tail=10))  # a clock the earlier version wrote
    assert upgraded.unattributed_until == 10 and dedupe.attributing(upgraded) == upgraded
    assert dedupe.may_hold_unattributed(DedupeClock(head=3, tail=10))
    assert dedupe.may_hold_unattributed(dataclasses.replace(upgraded, head=9, tail=30))
    assert not dedupe.may_hold_unattributed(dataclasses.replace(upgraded, head=10, tail=30))
    assert not dedupe.may_hold_unattributed(dedupe.attributing(DedupeClock()))  # a new cluster: never
