"""Commands of the replicated log and the results the state machine answers with.

Each command mirrors one oneof case of proto/v1/log.proto's LogEntry; the
replication layer converts between the two. Results are stored in the dedupe
table under the sender's identity and request id (core.dedupe), so a retried
request gets the first answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.core import codec
from coordinator.core.authz import Grant
from coordinator.core.errors import Code, ReasonCode, Rejection
from coordinator.core.history import Dependency
from coordinator.core.model import (Agent, Checkpoint, Epoch, Group, GroupSpec, GroupState, RetentionPolicy,
                                     SavedCheckpoint, Savepoint)


@dataclass(frozen=True)
class Token:
    """Fencing token of an agent write: a zombie's old incarnation or epoch is refused."""

    incarnation: int
    epoch: int
    # SHA-256 (hex) of the secret the writer sent: it must be the registered one.
    secret_hash: str = ""


@dataclass(frozen=True)
class CreateGroup:
    spec: GroupSpec


@dataclass(frozen=True)
class Register:
    group: str
    agent_id: str
    # SHA-256 (hex) of the client's secret for this registration (core.agent_secret).
    secret_hash: str = ""


@dataclass(frozen=True)
class CommitCheckpoint:
    token: Token
    checkpoint: Checkpoint


@dataclass(frozen=True)
class ReportDependencies:
    group: str
    agent_id: str
    token: Token
    records: tuple[Dependency, ...]


@dataclass(frozen=True)
class StartEpoch:
    group: str


@dataclass(frozen=True)
class AbortEpoch:
    group: str
    epoch: int
    reason: str


@dataclass(frozen=True)
class DeclareAgentFailed:
    group: str
    agent_id: str
    incarnation: int


@dataclass(frozen=True)
class AckOrder:
    group: str
    agent_id: str
    token: Token
    order_id: int


@dataclass(frozen=True)
class Deregister:
    group: str
    agent_id: str
    token: Token


@dataclass(frozen=True)
class GarbageCollect:
    """`blob_store`: release only the checkpoints held in that store (blob_stores.in_blob_store);
    empty: every checkpoint the group no longer needs."""

    group: str
    blob_store: str = ""


@dataclass(frozen=True)
class DeleteGroup:
    """Forget a finished group: every record it holds (agents, checkpoints, epochs,
    dependencies, orders, savepoints) is deleted; its blobs are the caller's to delete."""

    group: str


@dataclass(frozen=True)
class CreateSavepoint:
    """Name the group's newest consistent global checkpoint (core.savepoints.cut) and
    keep its checkpoints from garbage collection until the savepoint is deleted."""

    group: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteSavepoint:
    """Forget a savepoint: the next garbage collection may take what only it kept."""

    group: str
    name: str


@dataclass(frozen=True)
class SetRetention:
    """Replace the group's retention policy (core.retention): the next garbage
    collection keeps what it selects, and may take what only the old one kept."""

    group: str
    policy: RetentionPolicy


@dataclass(frozen=True)
class RestoreGroup:
    """Roll every member of a group back to one consistent global checkpoint, through
    the rollback orders a failure recovery issues (core.restore says which line).

    The target is a savepoint's name, or else the checkpoints the line must contain
    (the newest consistent global checkpoint containing them is taken)."""

    group: str
    savepoint: str = ""
    containing: tuple[SavedCheckpoint, ...] = ()


@dataclass(frozen=True)
class ForkedCheckpoint:
    """One checkpoint of a fork: the savepoint's checkpoint of `agent_id` at `index`,
    whose state the fork reads from `blob_uri`, a copy of the source's manifest (so
    each group's garbage collection deletes only its own manifests)."""

    agent_id: str
    index: int
    blob_uri: str


@dataclass(frozen=True)
class ForkGroup:
    """Create group `into` beside `group`, holding `savepoint`'s consistent cut: the
    same spec and retention policy, each agent of the cut at its checkpoint (read from
    the copy in `copies`), with no dependency records and no agent running yet."""

    group: str
    savepoint: str
    into: str
    copies: tuple[ForkedCheckpoint, ...] = ()
    # Only these agents of the savepoint (all when empty): a part of a consistent cut
    # is one too.
    agents: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReadBarrier:
    """A no-op entry that once served as a read point. Reads now take a read index
    (replication.read_index) and propose none; journals written before still hold
    some, and they apply as before."""


@dataclass(frozen=True)
class ResetDedupeClock:
    """Put the replicated dedupe clock and its watermark at the time this entry was
    proposed, even backwards (core.dedupe.reset): the way back from a clock pushed
    far ahead. Applied by the applier, which keeps that clock, not by the state machine."""


Command = (CreateGroup | Register | CommitCheckpoint | ReportDependencies | StartEpoch | AbortEpoch
           | DeclareAgentFailed | AckOrder | Deregister | GarbageCollect | DeleteGroup | ReadBarrier
           | ResetDedupeClock | CreateSavepoint | DeleteSavepoint | SetRetention | RestoreGroup
           | ForkGroup)


@dataclass(frozen=True)
class Entry:
    """A decoded log entry: the only inputs apply() sees (time included)."""

    request_id: str
    proposed_at: float
    command: Command
    # When the client first sent the request, repeated on retries (0: proposed_at).
    issued_at: float = 0.0
    # Who proposed it and what their binding allowed (core.authz); None: the leader
    # itself, or a node without authentication.
    principal: Grant | None = None


@dataclass(frozen=True)
class Proposal:
    """One Raft log entry as the applier sees it: one command, or a batch of them.

    A sub-entry that could not be decoded is its Failure: answered, never recorded.
    """

    proposed_at: float
    dedupe_window_s: float
    entries: tuple["Entry | Failure", ...]
    batch: bool = False
    # Every entry passed validate() already (the proposer's own decoding).
    validated: bool = False


# ---- results -----------------------------------------------------------------

@dataclass(frozen=True)
class GroupResult:
    group: Group


@dataclass(frozen=True)
class RegisterResult:
    agent: Agent
    group: Group
    resume_from: Checkpoint | None = None


@dataclass(frozen=True)
class CheckpointResult:
    checkpoint: Checkpoint
    stable_epoch: int


@dataclass(frozen=True)
class DependenciesResult:
    accepted: int


@dataclass(frozen=True)
class EpochResult:
    epoch: Epoch


@dataclass(frozen=True)
class RollbackTarget:
    agent_id: str
    checkpoint_index: int
    intervals_lost: int


@dataclass(frozen=True)
class RecoveryResult:
    recovery_id: int
    targets: tuple[RollbackTarget, ...]


@dataclass(frozen=True)
class AckResult:
    group_state: GroupState


@dataclass(frozen=True)
class GcResult:
    deletable_blob_uris: tuple[str, ...]  # none of a state held inline (a data: URI): it went with its record
    bytes: int
    checkpoints_deleted: int


@dataclass(frozen=True)
class SavepointResult:
    """The savepoint created, or the one deleted."""

    savepoint: Savepoint


@dataclass(frozen=True)
class RestoreStep:
    """One agent's part of a restore: the checkpoint it goes back to and what it loses."""

    agent_id: str
    checkpoint_index: int  # 0: its initial state
    intervals_lost: int  # as RollbackTarget's: the intervals after the checkpoint, the volatile one included
    checkpoints_lost: tuple[int, ...]  # its checkpoints after the line, deleted by the restore
    sends_undone: int  # reported deliveries of its messages sent after the line
    receives_undone: int  # reported deliveries to it after the line


@dataclass(frozen=True)
class RestoreResult:
    """The restore's recovery id (0 for a dry run, which changes nothing) and, by agent, its steps."""

    recovery_id: int
    steps: tuple[RestoreStep, ...]
    epoch: int = 0  # coordinated groups: the stable epoch the group is back at


@dataclass(frozen=True)
class ForkResult:
    """The new group and the checkpoints it was given, by agent id."""

    group: Group
    checkpoints: tuple[Checkpoint, ...]


@dataclass(frozen=True)
class EmptyResult:
    pass


@dataclass(frozen=True)
class ClockResult:
    """The replicated dedupe clock after and before a ResetDedupeClock, in seconds."""

    clock_s: float
    previous_clock_s: float


@dataclass(frozen=True)
class Failure:
    """A rejected command, stored like any result so a retry gets the same answer."""

    code: Code
    reason: str
    field: str = ""
    # Absent from answers stored before reasons existed: those decode as UNSPECIFIED.
    reason_code: ReasonCode = ReasonCode.UNSPECIFIED

    @classmethod
    def of(cls, rejection: Rejection) -> "Failure":
        return cls(rejection.code, rejection.reason, rejection.field, rejection.reason_code)


Result = (GroupResult | RegisterResult | CheckpointResult | DependenciesResult | EpochResult | RecoveryResult
          | AckResult | GcResult | SavepointResult | RestoreResult | ForkResult | EmptyResult | ClockResult | Failure)
RESULT_TYPES: dict[str, type] = {t.__name__: t for t in (
    GroupResult, RegisterResult, CheckpointResult, DependenciesResult, EpochResult, RecoveryResult,
    AckResult, GcResult, SavepointResult, RestoreResult, ForkResult, EmptyResult, ClockResult, Failure)}


class EncodedResult(bytes):
    """Encoded result bytes that still carry the object they encode, so the process
    that applied an entry (the leader, answering its client) need not decode it."""

    result: Result


def encode_result(result: Result) -> bytes:
    """Tagged so the dedupe table can hand back the same typed result on a retry."""
    encoded = EncodedResult(type(result).__name__.encode() + b"\n" + codec.encode(result))
    encoded.result = result  # results are frozen: sharing the object is safe
    return encoded


def decode_result(data: bytes) -> Result:
    carried = getattr(data, "result", None)
    if carried is not None:
        return carried
    name, _, body = data.partition(b"\n")
    return codec.decode(RESULT_TYPES[name.decode()], body)


def command_target(command: Command) -> tuple[str, str, str]:
    """The RPC a command stands for, and the group and agent id it acts on.

    Commands only the leader proposes (failure declarations, epoch aborts, read
    barriers) map to their own names, which authz.RPC_ACCESS does not list: an entry
    that carries a principal with one of them is refused unless the principal is admin."""
    match command:
        case CommitCheckpoint(checkpoint=cp):
            return "CommitCheckpoint", cp.group, cp.agent_id
        case Register() | ReportDependencies() | AckOrder() | Deregister():
            return type(command).__name__, command.group, command.agent_id
        case CreateGroup(spec=spec):
            return "CreateGroup", spec.name, ""
        case StartEpoch() | GarbageCollect() | DeleteGroup():
            return type(command).__name__, command.group, ""
        case _:
            return type(command).__name__, getattr(command, "group", ""), getattr(command, "agent_id", "")
