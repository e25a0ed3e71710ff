"""Retention policies in the pure core: what a policy selects, how SetRetention is
refused without a change, and that garbage collection keeps what the policy selects
on top of the recovery line and releases the rest."""
from __future__ import annotations

import json
import math

import pytest

from coordinator.core import codec
from coordinator.core import commands as c
from coordinator.core.authz import Grant, Role
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.model import Checkpoint, CheckpointKind, Group, GroupSpec, Mode, RetentionPolicy
from coordinator.core.retention import selected
from coordinator.core.state_machine import apply
from tests.core.test_state_machine import SHA, Machine

HOUR = 3600.0


def cp(index: int, at: float, stable: bool = True) -> Checkpoint:
    return Checkpoint("g", "a", index, 0, CheckpointKind.BASIC, f"file:///blobs/a/{index}", SHA, 1, created_at=at,
                      stable=stable)


def test_keep_last_selects_the_newest_stable_checkpoints() -> None:
    cps = [cp(1, 0.0), cp(2, 1.0), cp(3, 2.0, stable=False), cp(5, 3.0)]
    assert selected(cps, RetentionPolicy(keep_last=2), 10.0) == {2, 5}
    assert selected(cps, RetentionPolicy(keep_last=4), 10.0) == {1, 2, 5}
    assert selected(cps, RetentionPolicy(keep_last=1000), 10.0) == {1, 2, 5}
    assert selected(cps, RetentionPolicy(), 10.0) == set()


def test_buckets_select_the_newest_of_each_recent_period() -> None:
    # Hours 0, 0, 1, 3, 3 (and one stamped ahead of `now`, counted in the current hour).
    cps = [cp(1, 10.0), cp(2, 20.0), cp(3, HOUR + 5), cp(4, 3 * HOUR + 1), cp(6, 3 * HOUR + 9), cp(7, 9 * HOUR)]
    now = 3 * HOUR + 30
    assert selected(cps, RetentionPolicy(bucket_seconds=HOUR, buckets=4), now) == {2, 3, 7}
    # Two buckets: hours 2 and 3 only.
    assert selected(cps, RetentionPolicy(bucket_seconds=HOUR, buckets=2), now) == {7}
    assert selected(cps, RetentionPolicy(keep_last=1, bucket_seconds=HOUR, buckets=3), 2 * HOUR) == {2, 3, 7}


@pytest.fixture
def m() -> Machine:
    return Machine().with_group(GroupSpec("g", Mode.UNCOORDINATED, retention=0), "a")


@pytest.mark.parametrize("policy, field", [
    (RetentionPolicy(keep_last=-1), "policy.keep_last"),
    (RetentionPolicy(keep_last=1001), "policy.keep_last"),
    (RetentionPolicy(bucket_seconds=HOUR, buckets=-3), "policy.buckets"),
    (RetentionPolicy(bucket_seconds=HOUR, buckets=10_001), "policy.buckets"),
    (RetentionPolicy(bucket_seconds=0.5, buckets=3), "policy.bucket_seconds"),
    (RetentionPolicy(bucket_seconds=-HOUR, buckets=3), "policy.bucket_seconds"),
    (RetentionPolicy(bucket_seconds=math.nan, buckets=3), "policy.bucket_seconds"),
    (RetentionPolicy(bucket_seconds=math.inf, buckets=3), "policy.bucket_seconds"),
    (RetentionPolicy(bucket_seconds=HOUR), "policy.buckets"),
    (RetentionPolicy(buckets=3), "policy.buckets"),
])
def test_a_bad_policy_is_refused_and_changes_nothing(m: Machine, policy: RetentionPolicy, field: str) -> None:
    failure = m.fail(c.SetRetention("g", policy), Code.INVALID_ARGUMENT, field)
    assert failure.reason_code is ReasonCode.INVALID_FIELD
    assert m.state.group("g").retention_policy == RetentionPolicy()


def test_a_policy_for_an_unknown_group_is_refused(m: Machine) -> None:
    failure = m.fail(c.SetRetention("nope", RetentionPolicy(keep_last=1)), Code.NOT_FOUND)
    assert failure.reason_code is ReasonCode.GROUP_NOT_FOUND


def test_only_an_admin_may_set_a_policy(m: Machine) -> None:
    entry = c.Entry("r-agent", 100.0, c.SetRetention("g", RetentionPolicy(keep_last=1)),
                    principal=Grant("w1", Role.AGENT, "g", "*"))
    result = apply(m.state, entry)
    assert isinstance(result, c.Failure) and result.code is Code.PERMISSION_DENIED, result


def test_gc_keeps_what_the_policy_selects_and_releases_the_rest(m: Machine) -> None:
    set_policy = m.ok(c.SetRetention("g", RetentionPolicy(keep_last=2, bucket_seconds=HOUR, buckets=2)))
    assert set_policy.group.retention_policy == RetentionPolicy(2, HOUR, 2)
    assert m.state.group("g").retention_policy == RetentionPolicy(2, HOUR, 2)
    # Checkpoints 1-2 in hour 0, 3-4 in hour 1, 5-6 in hour 2; collected in hour 2.
    for index in range(1, 7):
        m.ok(c.CommitCheckpoint(c.Token(1, 0), cp(index, 0.0)), now=(index - 1) // 2 * HOUR + index)
    released = m.ok(c.GarbageCollect("g"), now=2 * HOUR + 60)
    # The line (6), keep_last (5, 6), the newest of hours 1 and 2 (4, 6): 1, 2, 3 go.
    assert sorted(released.deletable_blob_uris) == [f"file:///blobs/a/{i}" for i in (1, 2, 3)]
    assert [x.index for x in m.state.checkpoints("g", "a")] == [4, 5, 6]
    # An hour later hour 1 has left the window; without the policy only the line stays.
    assert m.ok(c.GarbageCollect("g"), now=3 * HOUR + 60).deletable_blob_uris == ("file:///blobs/a/4",)
    m.ok(c.SetRetention("g", RetentionPolicy()))
    assert m.ok(c.GarbageCollect("g"), now=3 * HOUR + 61).deletable_blob_uris == ("file:///blobs/a/5",)


def test_a_group_stored_before_policies_existed_has_none() -> None:
    stored = codec.to_plain(Group(GroupSpec("g")))
    del stored["retention_policy"]
    old = json.dumps({"v": codec.SCHEMA_VERSION, "d": stored}).encode()
    assert codec.decode(Group, old) == Group(GroupSpec("g"))
