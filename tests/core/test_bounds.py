"""Values a client could set but nobody could undo are refused, naming the field and the bound."""
from __future__ import annotations

import pytest

from coordinator.core import commands as c
from coordinator.core import ids
from coordinator.core.errors import Code, Rejection, ReasonCode, shown
from coordinator.core.history import Dependency
from coordinator.core.model import Checkpoint, CheckpointKind, GroupSpec, Mode
from coordinator.core.validation import MAX_CHECKPOINT_INDEX, MAX_COUNTER, validate

SHA = "ab" * 32


def refusal(command: c.Command) -> Rejection:
    with pytest.raises(Rejection) as info:
        validate(command)
    assert info.value.code is Code.INVALID_ARGUMENT and info.value.reason_code is ReasonCode.INVALID_FIELD
    return info.value


def checkpoint(**changes: object) -> c.CommitCheckpoint:
    fields: dict = dict(group="g", agent_id="a", index=1, epoch=0, kind=CheckpointKind.BASIC,
                        blob_uri="file:///b/1", sha256=SHA, size=1)
    fields.update(changes)
    return c.CommitCheckpoint(c.Token(1, 0), Checkpoint(**fields))


@pytest.mark.parametrize("field, value, bound", [
    ("lease_ttl_s", 1e-300, "0.5"),
    ("lease_ttl_s", 1e12, "604800"),
    ("epoch_timeout_s", 1e-300, "0.1"),
    ("checkpoint_interval_s", 1e-9, "0.1"),
    ("checkpoint_interval_s", float("inf"), "3.1536e+07"),
    ("mtbf_s", float("nan"), "1"),
    ("checkpoint_cost_s", -1.0, "0.001"),
])
def test_group_durations_outside_their_bounds_are_refused_naming_field_and_bound(
        field: str, value: float, bound: str) -> None:
    r = refusal(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, **{field: value})))
    assert r.field == f"spec.{field}" and bound in r.reason


def test_a_derived_epoch_interval_below_the_shortest_is_refused() -> None:
    # sqrt(2 * 0.001 * 1) = 0.045 s: the leader would start an epoch every 45 ms.
    r = refusal(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, checkpoint_cost_s=0.001, mtbf_s=1.0)))
    assert r.field == "spec.checkpoint_cost_s" and "0.1" in r.reason


def test_durations_at_their_bounds_and_unset_ones_are_accepted() -> None:
    validate(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, lease_ttl_s=0.5, epoch_timeout_s=0.1,
                                     checkpoint_interval_s=0.1)))
    validate(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, checkpoint_interval_s=0, checkpoint_cost_s=0, mtbf_s=0)))


@pytest.mark.parametrize("field, value", [
    ("index", 2**64 - 1), ("index", MAX_COUNTER + 1), ("size", 2**64 - 1),
])
def test_checkpoint_counters_beyond_their_bounds_are_refused(field: str, value: int) -> None:
    assert refusal(checkpoint(**{field: value})).field == f"checkpoint.{field}"


def test_the_highest_checkpoint_index_leaves_its_next_interval_in_bounds() -> None:
    """An agent at checkpoint k sends in interval k + 1: at k = 2^53 its receivers'
    dependency reports were refused, so its messages could never be delivered."""
    assert refusal(checkpoint(index=MAX_COUNTER)).field == "checkpoint.index"
    validate(checkpoint(index=MAX_CHECKPOINT_INDEX))
    validate(c.ReportDependencies("g", "a", c.Token(1, 0), (
        Dependency("b", MAX_CHECKPOINT_INDEX + 1, "a", MAX_CHECKPOINT_INDEX + 1, "m"),)))


@pytest.mark.parametrize("field", ["send_interval", "receive_interval", "send_generation"])
def test_dependency_counters_beyond_their_bounds_are_refused(field: str) -> None:
    record = dict(sender="b", send_interval=1, receiver="a", receive_interval=1, message_id="m")
    record[field] = 2**64 - 1
    r = refusal(c.ReportDependencies("g", "a", c.Token(1, 0), (Dependency(**record),)))
    assert r.field == f"records[0].{field}"


@pytest.mark.parametrize("address", [
    "a" * 64 + ".example:7000",  # a DNS label is at most 63 characters
    "a..b:7000", ".a:7000", ("a" * 63 + ".") * 4 + "a:7000",  # an empty label; a name past 253 characters
    "hé:7000", "a_b@c:7000", "[::1:7000",
])
def test_a_host_no_resolver_could_look_up_is_refused(address: str) -> None:
    """A name the resolver's IDNA codec cannot encode raised UnicodeError deep in AddNode (UNKNOWN)."""
    with pytest.raises(Rejection) as info:
        ids.check_address(address, "node")
    assert info.value.reason_code is ReasonCode.INVALID_FIELD and info.value.field == "node"


@pytest.mark.parametrize("address", [
    "127.0.0.1:7000", "localhost:1", "raftpoint-0.raftpoint-peers.ns.svc.cluster.local:7000", "[::1]:7000",
    "node_1.example.:50051", "a" * 63 + ".example:7000",
])
def test_host_names_and_ip_addresses_are_accepted(address: str) -> None:
    ids.check_address(address, "node")


@pytest.mark.parametrize("check", [
    lambda v: ids.check_id(v, "agent_id"),
    lambda v: ids.check_request_id(v),
    lambda v: ids.check_sha256(v + "0" * 63, "sha256"),
])
def test_a_trailing_newline_is_refused_by_every_pattern(check) -> None:
    with pytest.raises(Rejection):
        check("a\n")


def test_refusals_quote_a_huge_bad_value_cut_short() -> None:
    huge = "a" * 4_000_000 + "!"
    with pytest.raises(Rejection) as info:
        ids.check_id(huge, "agent_id")
    assert len(str(info.value)) < 300 and "4000003 characters" in str(info.value)
    assert shown("ab") == "'ab'"
