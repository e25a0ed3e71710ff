"""The coordinator's replicated records.

Plain dataclasses so the pure core can be tested without protobuf or LMDB; the
storage layer encodes them canonically (see codec.py) and the transport maps them
to protobuf messages.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Mode(StrEnum):
    COORDINATED = "coordinated"
    CIC_BCS = "cic_bcs"
    CIC_HMNR = "cic_hmnr"
    CIC_FDAS = "cic_fdas"
    UNCOORDINATED = "uncoordinated"


class GroupState(StrEnum):
    RUNNING = "running"
    RECOVERING = "recovering"


class AgentState(StrEnum):
    ALIVE = "alive"
    FAILED = "failed"
    DEREGISTERED = "deregistered"


class CheckpointKind(StrEnum):
    INITIAL = "initial"
    BASIC = "basic"
    FORCED = "forced"
    COORDINATED = "coordinated"


class EpochState(StrEnum):
    STARTED = "started"
    STABLE = "stable"
    ABORTED = "aborted"


class OrderKind(StrEnum):
    ROLL_BACK = "roll_back"
    CHECKPOINT_NOW = "checkpoint_now"
    CHECKPOINT_SUGGESTED = "checkpoint_suggested"


# Epoch records a group keeps: the open or last one and those before it, down to
# RECENT_EPOCHS in all (what GetGroup shows). Garbage collection deletes older ones,
# which no command reads: a checkpoint joins only the open epoch.
RECENT_EPOCHS = 10


@dataclass(frozen=True)
class GroupSpec:
    name: str
    mode: Mode = Mode.COORDINATED
    retention: int = 2
    checkpoint_interval_s: float = 0.0
    checkpoint_cost_s: float = 0.0
    mtbf_s: float = 0.0
    lease_ttl_s: float = 10.0
    epoch_timeout_s: float = 30.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Stable checkpoints a group keeps per agent beyond what recovery needs
    (core.retention.selected): the newest `keep_last`, and the newest of each of the
    last `buckets` periods of `bucket_seconds` (by commit time). All 0: none."""

    keep_last: int = 0
    bucket_seconds: float = 0.0
    buckets: int = 0


@dataclass(frozen=True)
class Group:
    spec: GroupSpec
    state: GroupState = GroupState.RUNNING
    current_epoch: int = 0
    stable_epoch: int = 0
    members: tuple[str, ...] = ()
    created_at: float = 0.0
    recovery_id: int = 0
    next_order_id: int = 1
    # Set by SetRetention; the spec, fixed at creation, does not hold it.
    retention_policy: RetentionPolicy = RetentionPolicy()


@dataclass(frozen=True)
class Fence:
    """A rollback of `agent_id` to checkpoint `index`, taking effect at `generation`:
    what the agent did in intervals after `index` while in an older generation is
    undone. Intervals after a rollback reuse the same numbers, so the generation is
    what tells a message of the agent's new life from an undone one."""

    agent_id: str
    generation: int
    index: int


@dataclass(frozen=True)
class Agent:
    group: str
    agent_id: str
    incarnation: int
    state: AgentState = AgentState.ALIVE
    registered_at: float = 0.0
    last_checkpoint_index: int = 0
    # The rollback order this agent must acknowledge before it may write again (0: none).
    rollback_order: int = 0
    # Bumped by every registration and every rollback order; messages carry it.
    generation: int = 0
    # The agent's rollbacks that can still undo a message in flight (coordinator.core.fences).
    fences: tuple[Fence, ...] = ()
    # No recovery line can take the agent below this checkpoint any more (what garbage
    # collection kept): the agent may forget what it logged to re-deliver before it.
    rollback_floor: int = 0
    # SHA-256 (hex) of the secret this incarnation registered with (core.agent_secret);
    # never shown by a read.
    secret_hash: str = ""


@dataclass(frozen=True)
class Checkpoint:
    group: str
    agent_id: str
    index: int
    epoch: int
    kind: CheckpointKind
    blob_uri: str
    sha256: str
    size: int
    schema_version: int = 0
    config_hash: str = ""
    dependency_versions: dict[str, str] = field(default_factory=dict)
    parent_index: int = 0
    channel_state_uri: str = ""
    created_at: float = 0.0
    incarnation: int = 0
    stable: bool = False


@dataclass(frozen=True)
class Epoch:
    group: str
    epoch: int
    state: EpochState
    members: tuple[str, ...]
    committed: tuple[str, ...] = ()
    started_at: float = 0.0
    deadline: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class Order:
    group: str
    agent_id: str
    order_id: int
    kind: OrderKind
    checkpoint_index: int = 0
    epoch: int = 0
    recovery_id: int = 0
    interval_s: float = 0.0
    acked: bool = False
    # Rollback orders: the generation the agent takes, and the whole recovery line (one
    # fence per agent that rolls back), so a receiver can tell which of the messages it
    # must forget were not undone at their sender and re-deliver them.
    generation: int = 0
    line: tuple[Fence, ...] = ()


@dataclass(frozen=True)
class SavedCheckpoint:
    """One agent's part of a savepoint: the checkpoint it would restore (0: its initial state)."""

    agent_id: str
    index: int


@dataclass(frozen=True)
class Savepoint:
    """A named consistent global checkpoint of a group, kept until deleted.

    Garbage collection never deletes a checkpoint a savepoint names
    (core.savepoints.pinned), whatever the recovery line has moved past."""

    group: str
    name: str
    checkpoints: tuple[SavedCheckpoint, ...]
    # Coordinated groups: the stable epoch the savepoint is; 0 for the other modes.
    epoch: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
