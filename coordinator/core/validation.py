"""Stateless validation of commands.

Run by the transport before proposing (so nothing invalid reaches the Raft log)
and again by apply() (so a log written by any client is still safe): one
function, two callers.

Every numeric field has both bounds here (and nowhere else; the proto comments
quote them): a value a client can set but nobody can undo is refused instead.
A checkpoint index of 2^64-1 left no higher index to commit; a lease of 1e-300 s
failed every agent at its first check; an epoch interval of 1e-9 s kept the
leader proposing epochs forever.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

from coordinator.core import commands as c
from coordinator.core import data_uris, ids
from coordinator.core.epochs import epoch_interval
from coordinator.core.errors import Rejection, shown
from coordinator.core.model import Checkpoint, GroupSpec, Mode, RetentionPolicy, SavedCheckpoint

MAX_DEPENDENCIES_PER_REPORT = 10_000
# Stored dependency records per reporting agent (a quota on state, checked by the
# state machine): sixty reports once added 66 MB of state per node in ten seconds.
MAX_DEPENDENCIES_PER_AGENT = 100_000
MAX_RETENTION = 1_000
MAX_DEPENDENCY_VERSIONS = 64
MAX_WHAT_IF_FAILED = 10_000
# A savepoint's labels: free-form notes (who, why), keys shaped like ids.
MAX_SAVEPOINT_LABELS = 32
MAX_LABEL_VALUE_CHARS = 256
# Checkpoint indexes, intervals and generations: far below 2^64, so whoever reaches
# the bound by counting one at a time never does, and a higher value always exists.
MAX_COUNTER = 2**53
# An agent at checkpoint k sends in interval k + 1, which must still be a valid interval.
MAX_CHECKPOINT_INDEX = MAX_COUNTER - 1
# How far past the agent's last checkpoint one index may jump. Indexes only grow, so an
# index at the top leaves no later one to commit; with this bound reaching it takes
# 2^21 commits, not one. BCS forced checkpoints jump to the sender's index: a jump is
# the difference between two agents' checkpoint counts, far below 2^32 in practice.
MAX_INDEX_STEP = 2**32
MAX_CHECKPOINT_BYTES = 2**60
DAY_S = 86_400.0
# Inclusive (low, high) bounds of each GroupSpec duration, in seconds. 0 is also
# allowed for the three fields that use it to mean "not set" (ZERO_MEANS_UNSET).
SPEC_SECONDS: dict[str, tuple[float, float]] = {
    "lease_ttl_s": (0.5, 7 * DAY_S),
    "epoch_timeout_s": (0.1, 7 * DAY_S),
    "checkpoint_interval_s": (0.1, 365 * DAY_S),
    "checkpoint_cost_s": (0.001, 365 * DAY_S),
    "mtbf_s": (1.0, 100 * 365 * DAY_S),
}
ZERO_MEANS_UNSET = frozenset({"checkpoint_interval_s", "checkpoint_cost_s", "mtbf_s"})
# A retention policy's time buckets: a period of one second to a year, and at most
# ten thousand of them (an hourly bucket for more than a year).
RETENTION_BUCKET_SECONDS = (1.0, 365 * DAY_S)
MAX_RETENTION_BUCKETS = 10_000
# The shortest time between epochs, however it is derived (Young/Daly included).
MIN_EPOCH_INTERVAL_S = SPEC_SECONDS["checkpoint_interval_s"][0]


def validate(command: c.Command) -> None:
    """Raise Rejection naming the first invalid field."""
    match command:
        case c.CreateGroup(spec=spec):
            _spec(spec)
        case c.CommitCheckpoint(checkpoint=cp):
            _checkpoint(cp)
        case c.ReportDependencies():
            _dependencies(command)
        case c.GarbageCollect(group=group, blob_store=blob_store):
            ids.check_id(group, "group")
            ids.check_uri(blob_store, "blob_store", required=False)
        case c.AbortEpoch(group=group) | c.StartEpoch(group=group) | c.DeleteGroup(group=group):
            ids.check_id(group, "group")
        case c.CreateSavepoint(group=group, name=name, labels=labels):
            ids.check_id(group, "group")
            ids.check_id(name, "name")
            _labels(labels)
        case c.DeleteSavepoint(group=group, name=name):
            ids.check_id(group, "group")
            ids.check_id(name, "name")
        case c.SetRetention(group=group, policy=policy):
            ids.check_id(group, "group")
            _retention(policy)
        case c.RestoreGroup():
            _restore(command)
        case c.ForkGroup():
            _fork(command)
        case c.ReadBarrier() | c.ResetDedupeClock():
            pass
        case _:
            ids.check_id(command.group, "group")
            ids.check_id(command.agent_id, "agent_id")


def _spec(spec: GroupSpec) -> None:
    ids.check_id(spec.name, "spec.group")
    if not isinstance(spec.mode, Mode):
        raise Rejection.invalid("spec.mode", "must be one of " + ", ".join(m.value for m in Mode))
    if not 0 <= spec.retention <= MAX_RETENTION:
        raise Rejection.invalid("spec.retention", f"must be between 0 and {MAX_RETENTION}")
    for name, (low, high) in SPEC_SECONDS.items():
        value = getattr(spec, name)
        if value == 0 and name in ZERO_MEANS_UNSET:
            continue
        if not low <= value <= high:  # also refuses NaN
            unset = " (or 0: not set)" if name in ZERO_MEANS_UNSET else ""
            raise Rejection.invalid(f"spec.{name}", f"must be between {low:g} and {high:g} seconds{unset}, "
                                                    f"got {shown(value)}")
    interval = epoch_interval(spec)
    if 0 < interval < MIN_EPOCH_INTERVAL_S:
        raise Rejection.invalid("spec.checkpoint_cost_s", f"with mtbf_s gives epochs every {interval:g}s; "
                                                          f"the shortest interval is {MIN_EPOCH_INTERVAL_S:g}s")


def _retention(policy: RetentionPolicy) -> None:
    if not 0 <= policy.keep_last <= MAX_RETENTION:
        raise Rejection.invalid("policy.keep_last", f"must be between 0 and {MAX_RETENTION}, "
                                                    f"got {shown(policy.keep_last)}")
    if not 0 <= policy.buckets <= MAX_RETENTION_BUCKETS:
        raise Rejection.invalid("policy.buckets", f"must be between 0 and {MAX_RETENTION_BUCKETS}, "
                                                  f"got {shown(policy.buckets)}")
    low, high = RETENTION_BUCKET_SECONDS
    if policy.bucket_seconds != 0 and not low <= policy.bucket_seconds <= high:  # also refuses NaN
        raise Rejection.invalid("policy.bucket_seconds", f"must be between {low:g} and {high:g} seconds "
                                                         f"(or 0: no buckets), got {shown(policy.bucket_seconds)}")
    if bool(policy.buckets) != bool(policy.bucket_seconds):
        raise Rejection.invalid("policy.buckets", "bucket_seconds and buckets are set together (both 0: no "
                                                  f"buckets), got {shown(policy.bucket_seconds)} and "
                                                  f"{shown(policy.buckets)}")


def _counter(value: int, field: str, low: int = 0, high: int = MAX_COUNTER) -> None:
    if not low <= value <= high:
        bound = "2^53" if high == MAX_COUNTER else "2^53 - 1"
        raise Rejection.invalid(field, f"must be between {low} and {bound}, got {shown(value)}")


def _checkpoint(cp: Checkpoint) -> None:
    ids.check_id(cp.group, "checkpoint.group")
    ids.check_id(cp.agent_id, "checkpoint.agent_id")
    if cp.index < 1:
        raise Rejection.invalid("checkpoint.index", "must be >= 1 (0 is the implicit initial state)")
    _counter(cp.index, "checkpoint.index", 1, MAX_CHECKPOINT_INDEX)
    ids.check_sha256(cp.sha256, "checkpoint.sha256")
    ids.check_uri(cp.channel_state_uri, "checkpoint.channel_state_uri", required=False)
    if not 0 <= cp.size <= MAX_CHECKPOINT_BYTES:
        raise Rejection.invalid("checkpoint.size", f"must be between 0 and 2^60 bytes, got {shown(cp.size)}")
    check_blob_uri(cp.blob_uri, "checkpoint.blob_uri", cp.sha256, cp.size)
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
        _counter(rec.send_interval, f"records[{i}].send_interval", 1)
        _counter(rec.receive_interval, f"records[{i}].receive_interval", 1)
        _counter(rec.send_generation, f"records[{i}].send_generation")


def _labels(labels: dict[str, str]) -> None:
    if len(labels) > MAX_SAVEPOINT_LABELS:
        raise Rejection.invalid("labels", f"at most {MAX_SAVEPOINT_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        ids.check_id(key, "labels")
        if len(value) > MAX_LABEL_VALUE_CHARS or not value.isprintable():
            raise Rejection.invalid(f"labels[{key}]", f"must be at most {MAX_LABEL_VALUE_CHARS} printable "
                                                      f"characters, got {shown(value)}")


def _restore(cmd: c.RestoreGroup) -> None:
    """A restore names its line one way: a savepoint, or the checkpoints it must contain."""
    ids.check_id(cmd.group, "group")
    if bool(cmd.savepoint) == bool(cmd.containing):
        raise Rejection.invalid("savepoint", "name a savepoint or the checkpoints the line must contain, not "
                                             + ("both" if cmd.savepoint else "neither"))
    if cmd.savepoint:
        ids.check_id(cmd.savepoint, "savepoint")
    _checkpoint_list(cmd.containing, "containing")


def _checkpoint_list(items: Sequence[SavedCheckpoint | c.ForkedCheckpoint], field: str) -> None:
    """Checkpoints named by agent and index (1 or more), at most one per agent."""
    if len(items) > MAX_WHAT_IF_FAILED:
        raise Rejection.invalid(field, f"at most {MAX_WHAT_IF_FAILED} checkpoints, got {len(items)}")
    seen: set[str] = set()
    for i, saved in enumerate(items):
        ids.check_id(saved.agent_id, f"{field}[{i}].agent_id")
        _counter(saved.index, f"{field}[{i}].index", 1, MAX_CHECKPOINT_INDEX)
        if saved.agent_id in seen:
            raise Rejection.invalid(f"{field}[{i}].agent_id", f"agent {saved.agent_id!r} is named twice")
        seen.add(saved.agent_id)


def _fork(cmd: c.ForkGroup) -> None:
    ids.check_id(cmd.group, "group")
    ids.check_id(cmd.savepoint, "savepoint")
    ids.check_id(cmd.into, "into")
    _checkpoint_list(cmd.copies, "copies")
    for i, copy in enumerate(cmd.copies):
        if not data_uris.is_inline(copy.blob_uri):  # an inline copy is checked against its source (forks.py)
            ids.check_uri(copy.blob_uri, f"copies[{i}].blob_uri", required=True)
    if len(cmd.agents) > MAX_WHAT_IF_FAILED:
        raise Rejection.invalid("agents", f"at most {MAX_WHAT_IF_FAILED} agents, got {len(cmd.agents)}")
    for i, agent_id in enumerate(cmd.agents):
        ids.check_id(agent_id, f"agents[{i}]")
        if agent_id in cmd.agents[:i]:
            raise Rejection.invalid(f"agents[{i}]", f"agent {agent_id!r} is named twice")


def check_blob_uri(uri: str, field: str, sha256: str, size: int) -> None:
    """A checkpoint's blob URI: a blob store's URI, or a data URI whose bytes are the
    checkpoint's state (its SHA-256 and size as committed), so that a state recorded
    inline is the state the commit describes."""
    if not data_uris.is_inline(uri):
        ids.check_uri(uri, field, required=True)
        return
    try:
        inline = data_uris.decode(uri)
    except data_uris.MalformedDataUri as exc:
        raise Rejection.invalid(field, str(exc)) from None
    if len(inline.data) != size:
        raise Rejection.invalid(field, f"holds {len(inline.data)} bytes, not the checkpoint's size {shown(size)}")
    actual = hashlib.sha256(inline.data).hexdigest()
    if actual != sha256:
        raise Rejection.invalid(field, f"holds bytes whose SHA-256 is {actual}, not the checkpoint's {sha256}")
    if inline.sha256 is not None and inline.sha256 != sha256:
        raise Rejection.invalid(field, f"names SHA-256 {inline.sha256} in its sha256 parameter, not the "
                                       f"checkpoint's {sha256}")


def check_index_step(index: int, last_index: int) -> None:
    """A checkpoint's index against the agent's last one (the state machine's check: it
    needs the agent), so no single commit takes the index out of reach of a later one."""
    if index - last_index > MAX_INDEX_STEP:
        raise Rejection.invalid("checkpoint.index", f"may be at most 2^32 above the agent's last checkpoint "
                                                    f"{last_index}, got {shown(index)}")


def check_failed_ids(failed: Sequence[str]) -> None:
    """A what-if's hypothetical failures: each an agent id, and no more than a group could hold."""
    if len(failed) > MAX_WHAT_IF_FAILED:
        raise Rejection.invalid("failed", f"at most {MAX_WHAT_IF_FAILED} agents, got {len(failed)}")
    for i, agent_id in enumerate(failed):
        ids.check_id(agent_id, f"failed[{i}]")
