"""Log entries built from core commands decode back to exactly those commands.

The leader applies the commands it holds and followers apply the bytes it sent, so
any field lost or retyped on the way (an int that comes back a float, a default
filled in) would split their states: the comparison is on the canonical encoding
that the state digest hashes, not only on dataclass equality (where 10 == 10.0).
"""
from __future__ import annotations

import typing

import pytest

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core import codec
from coordinator.core import commands as c
from coordinator.core.errors import Rejection
from coordinator.core.authz import Grant, Role
from coordinator.core.history import Dependency
from coordinator.core.model import Checkpoint, CheckpointKind, GroupSpec, Mode, RetentionPolicy, SavedCheckpoint

TOKEN = c.Token(incarnation=3, epoch=7, secret_hash=(b"s" * 16).hex())  # the field as the proposer fills it
CHECKPOINT = Checkpoint(group="g", agent_id="a", index=4, epoch=7, kind=CheckpointKind.FORCED,
                        blob_uri="file:///b/4", sha256="ab" * 32, size=123, schema_version=2, config_hash="cfg",
                        dependency_versions={"numpy": "1.26", "lib": "2"}, parent_index=3,
                        channel_state_uri="file:///c/4")
COMMANDS: list[c.Command] = [
    c.CreateGroup(GroupSpec("g", Mode.CIC_HMNR, retention=0, checkpoint_interval_s=1.5, checkpoint_cost_s=0.25,
                            mtbf_s=3600.0, lease_ttl_s=2.0, epoch_timeout_s=4.0)),
    c.CreateGroup(GroupSpec("defaults")),
    c.Register("g", "a", "ab" * 32),
    c.CommitCheckpoint(TOKEN, CHECKPOINT),
    c.ReportDependencies("g", "a", TOKEN, (Dependency("b", 2, "a", 5, "m-1", 4), Dependency("c", 1, "a", 5, "m-2"))),
    c.StartEpoch("g"),
    c.AbortEpoch("g", 9, "deadline passed"),
    c.DeclareAgentFailed("g", "a", 3),
    c.AckOrder("g", "a", TOKEN, 12),
    c.Deregister("g", "a", TOKEN),
    c.GarbageCollect("g"),
    c.DeleteGroup("g"),
    c.ReadBarrier(),
    c.ResetDedupeClock(),
    c.CreateSavepoint("g", "before-upgrade", {"by": "ops", "ticket": "T-12"}),
    c.CreateSavepoint("g", "bare"),
    c.DeleteSavepoint("g", "before-upgrade"),
    c.SetRetention("g", RetentionPolicy(keep_last=5, bucket_seconds=3600.0, buckets=24)),
    c.SetRetention("g", RetentionPolicy()),
    c.RestoreGroup("g", "before-upgrade"),
    c.RestoreGroup("g", containing=(SavedCheckpoint("a", 4), SavedCheckpoint("b", 2))),
    c.ForkGroup("g", "before-upgrade", "g-fork", (c.ForkedCheckpoint("a", 4, "file:///blobs/manifests/x.json"),)),
    c.ForkGroup("g", "before-upgrade", "g-fork", (c.ForkedCheckpoint("a", 4, "file:///m/x.json"),), ("a", "b")),
]


def through_the_log(entry: c.Entry) -> c.Entry:
    data = wire.entry_to_pb(entry).SerializeToString()
    return wire.entry_from_pb(log_pb2.LogEntry.FromString(data), entry.proposed_at)


def test_every_command_kind_is_covered() -> None:
    assert {type(cmd) for cmd in COMMANDS} == set(typing.get_args(c.Command))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda cmd: type(cmd).__name__)
def test_an_entry_decodes_to_the_command_it_was_built_from(command: c.Command) -> None:
    entry = c.Entry("rid-1", 1000.5, command, issued_at=999.25)
    decoded = through_the_log(entry)
    assert decoded == entry
    assert codec.encode(decoded.command) == codec.encode(command)


@pytest.mark.parametrize("principal", [None, Grant("w1", Role.AGENT, "g", "a*"), Grant("root", Role.ADMIN)])
def test_the_principal_survives_the_log(principal: Grant | None) -> None:
    entry = c.Entry("rid-1", 1000.5, c.Register("g", "a", "ab" * 32), principal=principal)
    assert through_the_log(entry) == entry


def test_a_request_decoded_by_a_servicer_survives_the_log() -> None:
    """What a client sends, through the servicer's decoder and the log, is what it meant;
    the checkpoint fields only the coordinator sets (created_at, ...) are not taken from it."""
    request = pb.CommitCheckpointRequest(request_id="r", token=pb.FencingToken(secret=b"s" * 16, incarnation=3, epoch=7),
                                         checkpoint=wire.checkpoint_to_pb(CHECKPOINT))
    request.checkpoint.created_at, request.checkpoint.stable = 5.0, True
    command = wire.commit_checkpoint_from_pb(request)
    assert command == c.CommitCheckpoint(TOKEN, CHECKPOINT)
    assert through_the_log(c.Entry("r", 1.0, command)).command == command


def test_proposals_read_back_as_built() -> None:
    entries = [c.Entry(f"r{i}", 0.0, cmd) for i, cmd in enumerate(COMMANDS[:3])]
    for batch in (entries[:1], entries):
        data = wire.proposal_to_pb(42.0, 600.0, [wire.entry_to_pb(e) for e in batch]).SerializeToString()
        proposal = wire.proposal_from_bytes(data)
        assert proposal == c.Proposal(42.0, 600.0, tuple(c.Entry(e.request_id, 42.0, e.command) for e in batch),
                                      batch=len(batch) > 1)


def test_an_entry_without_a_command_is_refused() -> None:
    with pytest.raises(Rejection) as info:
        wire.entry_from_pb(log_pb2.LogEntry(request_id="r"), 0.0)
    assert info.value.field == "command"
