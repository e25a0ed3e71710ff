"""Stateless validation of commands.

Run by the transport before proposing (so nothing invalid reaches the Raft log)
and again by apply() (so a log written by any client is still safe): one
function, two callers.
"""
from __future__ import annotations

from coordinator.core import commands as c
from coordinator.core import ids
from coordinator.core.errors import Rejection
from coordinator.core.model import Checkpoint, GroupSpec, Mode

MAX_DEPENDENCIES_PER_REPORT = 10_000
MAX_RETENTION = 1_000
MAX_DEPENDENCY_VERSIONS = 64


def validate(command: c.Command) -> None:
    """Raise Rejection naming the first invalid field."""
    match command:
        case c.CreateGroup(spec=spec):
            _spec(spec)
        case c.CommitCheckpoint(checkpoint=cp):
            _checkpoint(cp)
        case c.ReportDependencies():
            _dependencies(command)
        case c.AbortEpoch(group=group) | c.StartEpoch(group=group) | c.GarbageCollect(group=group):
            ids.check_id(group, "group")
        case c.ReadBarrier():
            pass
        case _:
            ids.check_id(command.group, "group")  # type: ignore[union-attr]
            ids.check_id(command.agent_id, "agent_id")  # type: ignore[union-attr]


def _spec(spec: GroupSpec) -> None:
    ids.check_id(spec.name, "spec.group")
    if not isinstance(spec.mode, Mode):
        raise Rejection.invalid("spec.mode", "must be one of " + ", ".join(m.value for m in Mode))
    if not 0 <= spec.retention <= MAX_RETENTION:
        raise Rejection.invalid("spec.retention", f"must be between 0 and {MAX_RETENTION}")
    for name in ("checkpoint_interval_s", "checkpoint_cost_s", "mtbf_s", "lease_ttl_s", "epoch_timeout_s"):
        value = getattr(spec, name)
        if not (0 <= value < 1e9):  # also rejects NaN
            raise Rejection.invalid(f"spec.{name}", "must be a finite number >= 0")
    for name in ("lease_ttl_s", "epoch_timeout_s"):
        if getattr(spec, name) <= 0:
            raise Rejection.invalid(f"spec.{name}", "must be > 0")


def _checkpoint(cp: Checkpoint) -> None:
    ids.check_id(cp.group, "checkpoint.group")
    ids.check_id(cp.agent_id, "checkpoint.agent_id")
    if cp.index < 1:
        raise Rejection.invalid("checkpoint.index", "must be >= 1 (0 is the implicit initial state)")
    ids.check_sha256(cp.sha256, "checkpoint.sha256")
    ids.check_uri(cp.blob_uri, "checkpoint.blob_uri", required=True)
    ids.check_uri(cp.channel_state_uri, "checkpoint.channel_state_uri", required=False)
    if cp.size < 0:
        raise Rejection.invalid("checkpoint.size", "must be >= 0")
    if len(cp.config_hash) > 256:
        raise Rejection.invalid("checkpoint.config_hash", "must be at most 256 characters")
    if len(cp.dependency_versions) > MAX_DEPENDENCY_VERSIONS or any(
            len(k) > 128 or len(v) > 128 for k, v in cp.dependency_versions.items()):
        raise Rejection.invalid("checkpoint.dependency_versions",
                                f"at most {MAX_DEPENDENCY_VERSIONS} entries of at most 128 characters each")
    if cp.parent_index and cp.parent_index >= cp.index:
        raise Rejection.invalid("checkpoint.parent_index", "must be lower than index")


def _dependencies(cmd: c.ReportDependencies) -> None:
    ids.check_id(cmd.group, "group")
    ids.check_id(cmd.agent_id, "agent_id")
    if len(cmd.records) > MAX_DEPENDENCIES_PER_REPORT:
        raise Rejection.invalid("records", f"at most {MAX_DEPENDENCIES_PER_REPORT} records per report")
    for i, rec in enumerate(cmd.records):
        ids.check_id(rec.sender, f"records[{i}].sender")
        ids.check_id(rec.message_id, f"records[{i}].message_id")
        if rec.receiver != cmd.agent_id:
            raise Rejection.invalid(f"records[{i}].receiver", "dependencies are reported by their receiver")
        if rec.send_interval < 1 or rec.receive_interval < 1:
            raise Rejection.invalid(f"records[{i}]", "intervals start at 1")
