from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GroupMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_MODE_UNSPECIFIED: _ClassVar[GroupMode]
    COORDINATED: _ClassVar[GroupMode]
    CIC_BCS: _ClassVar[GroupMode]
    CIC_HMNR: _ClassVar[GroupMode]
    CIC_FDAS: _ClassVar[GroupMode]
    UNCOORDINATED: _ClassVar[GroupMode]

class GroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATE_UNSPECIFIED: _ClassVar[GroupState]
    RUNNING: _ClassVar[GroupState]
    RECOVERING: _ClassVar[GroupState]

class CheckpointKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_KIND_UNSPECIFIED: _ClassVar[CheckpointKind]
    BASIC: _ClassVar[CheckpointKind]
    FORCED: _ClassVar[CheckpointKind]
    COORDINATED_CUT: _ClassVar[CheckpointKind]
    INITIAL: _ClassVar[CheckpointKind]

class EpochState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPOCH_STATE_UNSPECIFIED: _ClassVar[EpochState]
    EPOCH_STARTED: _ClassVar[EpochState]
    EPOCH_STABLE: _ClassVar[EpochState]
    EPOCH_ABORTED: _ClassVar[EpochState]

class AgentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_STATE_UNSPECIFIED: _ClassVar[AgentState]
    AGENT_ALIVE: _ClassVar[AgentState]
    AGENT_FAILED: _ClassVar[AgentState]
    AGENT_DEREGISTERED: _ClassVar[AgentState]

class ReasonCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_UNSPECIFIED: _ClassVar[ReasonCode]
    REASON_INVALID_FIELD: _ClassVar[ReasonCode]
    REASON_MALFORMED_ENTRY: _ClassVar[ReasonCode]
    REASON_WRONG_CHECKPOINT_KIND: _ClassVar[ReasonCode]
    REASON_ORDER_NOT_ADDRESSED: _ClassVar[ReasonCode]
    REASON_CLOCK_AHEAD: _ClassVar[ReasonCode]
    REASON_GROUP_NOT_FOUND: _ClassVar[ReasonCode]
    REASON_AGENT_NOT_FOUND: _ClassVar[ReasonCode]
    REASON_EPOCH_NOT_FOUND: _ClassVar[ReasonCode]
    REASON_SAVEPOINT_NOT_FOUND: _ClassVar[ReasonCode]
    REASON_GROUP_SPEC_CONFLICT: _ClassVar[ReasonCode]
    REASON_CHECKPOINT_CONFLICT: _ClassVar[ReasonCode]
    REASON_ALREADY_COMMITTED: _ClassVar[ReasonCode]
    REASON_REQUEST_ID_REUSED: _ClassVar[ReasonCode]
    REASON_SAVEPOINT_EXISTS: _ClassVar[ReasonCode]
    REASON_GROUP_EXISTS: _ClassVar[ReasonCode]
    REASON_STALE_INCARNATION: _ClassVar[ReasonCode]
    REASON_AGENT_NOT_ALIVE: _ClassVar[ReasonCode]
    REASON_EPOCH_NOT_STARTED: _ClassVar[ReasonCode]
    REASON_ORDER_PENDING: _ClassVar[ReasonCode]
    REASON_INDEX_NOT_ABOVE_LAST: _ClassVar[ReasonCode]
    REASON_PARENT_MISSING: _ClassVar[ReasonCode]
    REASON_NOT_OPEN_EPOCH: _ClassVar[ReasonCode]
    REASON_JOINED_AFTER_EPOCH: _ClassVar[ReasonCode]
    REASON_ORPHAN_MESSAGE: _ClassVar[ReasonCode]
    REASON_NOT_COORDINATED: _ClassVar[ReasonCode]
    REASON_GROUP_RECOVERING: _ClassVar[ReasonCode]
    REASON_EPOCH_STILL_OPEN: _ClassVar[ReasonCode]
    REASON_NO_LIVE_MEMBERS: _ClassVar[ReasonCode]
    REASON_REQUEST_TOO_OLD: _ClassVar[ReasonCode]
    REASON_MEMBERSHIP_CHANGE_REFUSED: _ClassVar[ReasonCode]
    REASON_GROUP_IN_USE: _ClassVar[ReasonCode]
    REASON_NODE_NOT_READY: _ClassVar[ReasonCode]
    REASON_TOO_FEW_VOTERS: _ClassVar[ReasonCode]
    REASON_TOO_FEW_LIVE_VOTERS: _ClassVar[ReasonCode]
    REASON_NO_CONSISTENT_CUT: _ClassVar[ReasonCode]
    REASON_NO_RESTORE_LINE: _ClassVar[ReasonCode]
    REASON_RESTORE_UNDOES_SAVEPOINT: _ClassVar[ReasonCode]
    REASON_DEPENDENCY_QUOTA: _ClassVar[ReasonCode]
    REASON_OVERLOADED: _ClassVar[ReasonCode]
    REASON_INTERNAL_ERROR: _ClassVar[ReasonCode]
    REASON_UNAUTHENTICATED: _ClassVar[ReasonCode]
    REASON_ROLE_FORBIDS: _ClassVar[ReasonCode]
    REASON_FOREIGN_AGENT: _ClassVar[ReasonCode]
    REASON_WRONG_AGENT_SECRET: _ClassVar[ReasonCode]
GROUP_MODE_UNSPECIFIED: GroupMode
COORDINATED: GroupMode
CIC_BCS: GroupMode
CIC_HMNR: GroupMode
CIC_FDAS: GroupMode
UNCOORDINATED: GroupMode
GROUP_STATE_UNSPECIFIED: GroupState
RUNNING: GroupState
RECOVERING: GroupState
CHECKPOINT_KIND_UNSPECIFIED: CheckpointKind
BASIC: CheckpointKind
FORCED: CheckpointKind
COORDINATED_CUT: CheckpointKind
INITIAL: CheckpointKind
EPOCH_STATE_UNSPECIFIED: EpochState
EPOCH_STARTED: EpochState
EPOCH_STABLE: EpochState
EPOCH_ABORTED: EpochState
AGENT_STATE_UNSPECIFIED: AgentState
AGENT_ALIVE: AgentState
AGENT_FAILED: AgentState
AGENT_DEREGISTERED: AgentState
REASON_UNSPECIFIED: ReasonCode
REASON_INVALID_FIELD: ReasonCode
REASON_MALFORMED_ENTRY: ReasonCode
REASON_WRONG_CHECKPOINT_KIND: ReasonCode
REASON_ORDER_NOT_ADDRESSED: ReasonCode
REASON_CLOCK_AHEAD: ReasonCode
REASON_GROUP_NOT_FOUND: ReasonCode
REASON_AGENT_NOT_FOUND: ReasonCode
REASON_EPOCH_NOT_FOUND: ReasonCode
REASON_SAVEPOINT_NOT_FOUND: ReasonCode
REASON_GROUP_SPEC_CONFLICT: ReasonCode
REASON_CHECKPOINT_CONFLICT: ReasonCode
REASON_ALREADY_COMMITTED: ReasonCode
REASON_REQUEST_ID_REUSED: ReasonCode
REASON_SAVEPOINT_EXISTS: ReasonCode
REASON_GROUP_EXISTS: ReasonCode
REASON_STALE_INCARNATION: ReasonCode
REASON_AGENT_NOT_ALIVE: ReasonCode
REASON_EPOCH_NOT_STARTED: ReasonCode
REASON_ORDER_PENDING: ReasonCode
REASON_INDEX_NOT_ABOVE_LAST: ReasonCode
REASON_PARENT_MISSING: ReasonCode
REASON_NOT_OPEN_EPOCH: ReasonCode
REASON_JOINED_AFTER_EPOCH: ReasonCode
REASON_ORPHAN_MESSAGE: ReasonCode
REASON_NOT_COORDINATED: ReasonCode
REASON_GROUP_RECOVERING: ReasonCode
REASON_EPOCH_STILL_OPEN: ReasonCode
REASON_NO_LIVE_MEMBERS: ReasonCode
REASON_REQUEST_TOO_OLD: ReasonCode
REASON_MEMBERSHIP_CHANGE_REFUSED: ReasonCode
REASON_GROUP_IN_USE: ReasonCode
REASON_NODE_NOT_READY: ReasonCode
REASON_TOO_FEW_VOTERS: ReasonCode
REASON_TOO_FEW_LIVE_VOTERS: ReasonCode
REASON_NO_CONSISTENT_CUT: ReasonCode
REASON_NO_RESTORE_LINE: ReasonCode
REASON_RESTORE_UNDOES_SAVEPOINT: ReasonCode
REASON_DEPENDENCY_QUOTA: ReasonCode
REASON_OVERLOADED: ReasonCode
REASON_INTERNAL_ERROR: ReasonCode
REASON_UNAUTHENTICATED: ReasonCode
REASON_ROLE_FORBIDS: ReasonCode
REASON_FOREIGN_AGENT: ReasonCode
REASON_WRONG_AGENT_SECRET: ReasonCode

class FencingToken(_message.Message):
    __slots__ = ("incarnation", "epoch", "secret")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    epoch: int
    secret: bytes
    def __init__(self, incarnation: _Optional[int] = ..., epoch: _Optional[int] = ..., secret: _Optional[bytes] = ...) -> None: ...

class GroupSpec(_message.Message):
    __slots__ = ("group", "mode", "retention", "checkpoint_interval_s", "checkpoint_cost_s", "mtbf_s", "lease_ttl_s", "epoch_timeout_s")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_COST_S_FIELD_NUMBER: _ClassVar[int]
    MTBF_S_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    EPOCH_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    group: str
    mode: GroupMode
    retention: int
    checkpoint_interval_s: float
    checkpoint_cost_s: float
    mtbf_s: float
    lease_ttl_s: float
    epoch_timeout_s: float
    def __init__(self, group: _Optional[str] = ..., mode: _Optional[_Union[GroupMode, str]] = ..., retention: _Optional[int] = ..., checkpoint_interval_s: _Optional[float] = ..., checkpoint_cost_s: _Optional[float] = ..., mtbf_s: _Optional[float] = ..., lease_ttl_s: _Optional[float] = ..., epoch_timeout_s: _Optional[float] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("spec", "state", "current_epoch", "stable_epoch", "members", "created_at", "recovery_id", "retention_policy")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STABLE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ID_FIELD_NUMBER: _ClassVar[int]
    RETENTION_POLICY_FIELD_NUMBER: _ClassVar[int]
    spec: GroupSpec
    state: GroupState
    current_epoch: int
    stable_epoch: int
    members: _containers.RepeatedScalarFieldContainer[str]
    created_at: float
    recovery_id: int
    retention_policy: RetentionPolicy
    def __init__(self, spec: _Optional[_Union[GroupSpec, _Mapping]] = ..., state: _Optional[_Union[GroupState, str]] = ..., current_epoch: _Optional[int] = ..., stable_epoch: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., created_at: _Optional[float] = ..., recovery_id: _Optional[int] = ..., retention_policy: _Optional[_Union[RetentionPolicy, _Mapping]] = ...) -> None: ...

class RetentionPolicy(_message.Message):
    __slots__ = ("keep_last", "bucket_seconds", "buckets")
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    BUCKET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    keep_last: int
    bucket_seconds: float
    buckets: int
    def __init__(self, keep_last: _Optional[int] = ..., bucket_seconds: _Optional[float] = ..., buckets: _Optional[int] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("group", "agent_id", "incarnation", "state", "registered_at", "last_checkpoint_index", "generation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    incarnation: int
    state: AgentState
    registered_at: float
    last_checkpoint_index: int
    generation: int
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., state: _Optional[_Union[AgentState, str]] = ..., registered_at: _Optional[float] = ..., last_checkpoint_index: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class CheckpointMeta(_message.Message):
    __slots__ = ("group", "agent_id", "index", "epoch", "kind", "blob_uri", "sha256", "size", "schema_version", "config_hash", "dependency_versions", "parent_index", "channel_state_uri", "created_at", "incarnation", "stable")
    class DependencyVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BLOB_URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PARENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_STATE_URI_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STABLE_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    index: int
    epoch: int
    kind: CheckpointKind
    blob_uri: str
    sha256: str
    size: int
    schema_version: int
    config_hash: str
    dependency_versions: _containers.ScalarMap[str, str]
    parent_index: int
    channel_state_uri: str
    created_at: float
    incarnation: int
    stable: bool
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., index: _Optional[int] = ..., epoch: _Optional[int] = ..., kind: _Optional[_Union[CheckpointKind, str]] = ..., blob_uri: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., schema_version: _Optional[int] = ..., config_hash: _Optional[str] = ..., dependency_versions: _Optional[_Mapping[str, str]] = ..., parent_index: _Optional[int] = ..., channel_state_uri: _Optional[str] = ..., created_at: _Optional[float] = ..., incarnation: _Optional[int] = ..., stable: _Optional[bool] = ...) -> None: ...

class DependencyRecord(_message.Message):
    __slots__ = ("sender", "send_interval", "receiver", "receive_interval", "message_id", "send_generation")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    SEND_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SEND_GENERATION_FIELD_NUMBER: _ClassVar[int]
    sender: str
    send_interval: int
    receiver: str
    receive_interval: int
    message_id: str
    send_generation: int
    def __init__(self, sender: _Optional[str] = ..., send_interval: _Optional[int] = ..., receiver: _Optional[str] = ..., receive_interval: _Optional[int] = ..., message_id: _Optional[str] = ..., send_generation: _Optional[int] = ...) -> None: ...

class Epoch(_message.Message):
    __slots__ = ("group", "epoch", "state", "members", "committed", "started_at", "deadline", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch: int
    state: EpochState
    members: _containers.RepeatedScalarFieldContainer[str]
    committed: _containers.RepeatedScalarFieldContainer[str]
    started_at: float
    deadline: float
    reason: str
    def __init__(self, group: _Optional[str] = ..., epoch: _Optional[int] = ..., state: _Optional[_Union[EpochState, str]] = ..., members: _Optional[_Iterable[str]] = ..., committed: _Optional[_Iterable[str]] = ..., started_at: _Optional[float] = ..., deadline: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class RollBack(_message.Message):
    __slots__ = ("checkpoint_index", "recovery_id", "generation", "line")
    CHECKPOINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    checkpoint_index: int
    recovery_id: int
    generation: int
    line: _containers.RepeatedCompositeFieldContainer[RollbackTarget]
    def __init__(self, checkpoint_index: _Optional[int] = ..., recovery_id: _Optional[int] = ..., generation: _Optional[int] = ..., line: _Optional[_Iterable[_Union[RollbackTarget, _Mapping]]] = ...) -> None: ...

class CheckpointNow(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class CheckpointSuggested(_message.Message):
    __slots__ = ("interval_s",)
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    interval_s: float
    def __init__(self, interval_s: _Optional[float] = ...) -> None: ...

class Order(_message.Message):
    __slots__ = ("order_id", "group", "agent_id", "roll_back", "checkpoint_now", "checkpoint_suggested", "acked")
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROLL_BACK_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NOW_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SUGGESTED_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    order_id: int
    group: str
    agent_id: str
    roll_back: RollBack
    checkpoint_now: CheckpointNow
    checkpoint_suggested: CheckpointSuggested
    acked: bool
    def __init__(self, order_id: _Optional[int] = ..., group: _Optional[str] = ..., agent_id: _Optional[str] = ..., roll_back: _Optional[_Union[RollBack, _Mapping]] = ..., checkpoint_now: _Optional[_Union[CheckpointNow, _Mapping]] = ..., checkpoint_suggested: _Optional[_Union[CheckpointSuggested, _Mapping]] = ..., acked: _Optional[bool] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("request_id", "spec")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    spec: GroupSpec
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[GroupSpec, _Mapping]] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("request_id", "group", "agent_id", "secret")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    agent_id: str
    secret: bytes
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., agent_id: _Optional[str] = ..., secret: _Optional[bytes] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("incarnation", "mode", "current_epoch", "lease_ttl_s", "stable_epoch", "resume_from", "generation", "recovery_id")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    STABLE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ID_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    mode: GroupMode
    current_epoch: int
    lease_ttl_s: float
    stable_epoch: int
    resume_from: CheckpointMeta
    generation: int
    recovery_id: int
    def __init__(self, incarnation: _Optional[int] = ..., mode: _Optional[_Union[GroupMode, str]] = ..., current_epoch: _Optional[int] = ..., lease_ttl_s: _Optional[float] = ..., stable_epoch: _Optional[int] = ..., resume_from: _Optional[_Union[CheckpointMeta, _Mapping]] = ..., generation: _Optional[int] = ..., recovery_id: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "agent_id", "token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    token: FencingToken
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("current_epoch", "state", "lease_ttl_s", "rollback_floor")
    CURRENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FLOOR_FIELD_NUMBER: _ClassVar[int]
    current_epoch: int
    state: GroupState
    lease_ttl_s: float
    rollback_floor: int
    def __init__(self, current_epoch: _Optional[int] = ..., state: _Optional[_Union[GroupState, str]] = ..., lease_ttl_s: _Optional[float] = ..., rollback_floor: _Optional[int] = ...) -> None: ...

class CommitCheckpointRequest(_message.Message):
    __slots__ = ("request_id", "token", "checkpoint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token: FencingToken
    checkpoint: CheckpointMeta
    def __init__(self, request_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointMeta, _Mapping]] = ...) -> None: ...

class CommitCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "stable_epoch")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STABLE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    checkpoint: CheckpointMeta
    stable_epoch: int
    def __init__(self, checkpoint: _Optional[_Union[CheckpointMeta, _Mapping]] = ..., stable_epoch: _Optional[int] = ...) -> None: ...

class ReportDependenciesRequest(_message.Message):
    __slots__ = ("request_id", "group", "agent_id", "token", "records")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    agent_id: str
    token: FencingToken
    records: _containers.RepeatedCompositeFieldContainer[DependencyRecord]
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., agent_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ..., records: _Optional[_Iterable[_Union[DependencyRecord, _Mapping]]] = ...) -> None: ...

class ReportDependenciesResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    def __init__(self, accepted: _Optional[int] = ...) -> None: ...

class WatchOrdersRequest(_message.Message):
    __slots__ = ("group", "agent_id", "token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    token: FencingToken
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class AckOrderRequest(_message.Message):
    __slots__ = ("request_id", "group", "agent_id", "token", "order_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    agent_id: str
    token: FencingToken
    order_id: int
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., agent_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ..., order_id: _Optional[int] = ...) -> None: ...

class AckOrderResponse(_message.Message):
    __slots__ = ("group_state",)
    GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
    group_state: GroupState
    def __init__(self, group_state: _Optional[_Union[GroupState, str]] = ...) -> None: ...

class DeregisterRequest(_message.Message):
    __slots__ = ("request_id", "group", "agent_id", "token")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    agent_id: str
    token: FencingToken
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., agent_id: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartEpochRequest(_message.Message):
    __slots__ = ("request_id", "group")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class StartEpochResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: Epoch
    def __init__(self, epoch: _Optional[_Union[Epoch, _Mapping]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("group", "page_size", "page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    page_size: int
    page_token: str
    def __init__(self, group: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetGroupResponse(_message.Message):
    __slots__ = ("group", "agents", "recent_epochs", "next_page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    RECENT_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: Group
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    recent_epochs: _containers.RepeatedCompositeFieldContainer[Epoch]
    next_page_token: str
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., recent_epochs: _Optional[_Iterable[_Union[Epoch, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("group", "agent_id", "page_size", "page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    page_size: int
    page_token: str
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints", "next_page_token")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointMeta]
    next_page_token: str
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[CheckpointMeta, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WhatIfRequest(_message.Message):
    __slots__ = ("group", "failed")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    group: str
    failed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., failed: _Optional[_Iterable[str]] = ...) -> None: ...

class RollbackTarget(_message.Message):
    __slots__ = ("agent_id", "checkpoint_index", "intervals_lost", "generation")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_LOST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    checkpoint_index: int
    intervals_lost: int
    generation: int
    def __init__(self, agent_id: _Optional[str] = ..., checkpoint_index: _Optional[int] = ..., intervals_lost: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class WhatIfResponse(_message.Message):
    __slots__ = ("targets",)
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[RollbackTarget]
    def __init__(self, targets: _Optional[_Iterable[_Union[RollbackTarget, _Mapping]]] = ...) -> None: ...

class GarbageCollectRequest(_message.Message):
    __slots__ = ("request_id", "group", "blob_store")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BLOB_STORE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    blob_store: str
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., blob_store: _Optional[str] = ...) -> None: ...

class GarbageCollectResponse(_message.Message):
    __slots__ = ("deletable_blob_uris", "bytes")
    DELETABLE_BLOB_URIS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    deletable_blob_uris: _containers.RepeatedScalarFieldContainer[str]
    bytes: int
    def __init__(self, deletable_blob_uris: _Optional[_Iterable[str]] = ..., bytes: _Optional[int] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("request_id", "group")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class ResetDedupeClockRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ResetDedupeClockResponse(_message.Message):
    __slots__ = ("clock_s", "previous_clock_s")
    CLOCK_S_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_CLOCK_S_FIELD_NUMBER: _ClassVar[int]
    clock_s: float
    previous_clock_s: float
    def __init__(self, clock_s: _Optional[float] = ..., previous_clock_s: _Optional[float] = ...) -> None: ...

class SavedCheckpoint(_message.Message):
    __slots__ = ("agent_id", "index")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    index: int
    def __init__(self, agent_id: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class Savepoint(_message.Message):
    __slots__ = ("group", "name", "checkpoints", "epoch", "labels", "created_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    group: str
    name: str
    checkpoints: _containers.RepeatedCompositeFieldContainer[SavedCheckpoint]
    epoch: int
    labels: _containers.ScalarMap[str, str]
    created_at: float
    def __init__(self, group: _Optional[str] = ..., name: _Optional[str] = ..., checkpoints: _Optional[_Iterable[_Union[SavedCheckpoint, _Mapping]]] = ..., epoch: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[float] = ...) -> None: ...

class CreateSavepointRequest(_message.Message):
    __slots__ = ("request_id", "group", "name", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    name: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeleteSavepointRequest(_message.Message):
    __slots__ = ("request_id", "group", "name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    name: str
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SavepointResponse(_message.Message):
    __slots__ = ("savepoint",)
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    savepoint: Savepoint
    def __init__(self, savepoint: _Optional[_Union[Savepoint, _Mapping]] = ...) -> None: ...

class ListSavepointsRequest(_message.Message):
    __slots__ = ("group", "page_size", "page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    page_size: int
    page_token: str
    def __init__(self, group: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSavepointsResponse(_message.Message):
    __slots__ = ("savepoints", "next_page_token")
    SAVEPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    savepoints: _containers.RepeatedCompositeFieldContainer[Savepoint]
    next_page_token: str
    def __init__(self, savepoints: _Optional[_Iterable[_Union[Savepoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetRetentionRequest(_message.Message):
    __slots__ = ("request_id", "group", "policy")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    policy: RetentionPolicy
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., policy: _Optional[_Union[RetentionPolicy, _Mapping]] = ...) -> None: ...

class SetRetentionResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "next_page_token")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    next_page_token: str
    def __init__(self, groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListDependenciesRequest(_message.Message):
    __slots__ = ("group", "page_size", "page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    page_size: int
    page_token: str
    def __init__(self, group: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDependenciesResponse(_message.Message):
    __slots__ = ("dependencies", "next_page_token")
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dependencies: _containers.RepeatedCompositeFieldContainer[DependencyRecord]
    next_page_token: str
    def __init__(self, dependencies: _Optional[_Iterable[_Union[DependencyRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RestoreGroupRequest(_message.Message):
    __slots__ = ("request_id", "group", "savepoint", "containing", "dry_run")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    CONTAINING_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    savepoint: str
    containing: _containers.RepeatedCompositeFieldContainer[SavedCheckpoint]
    dry_run: bool
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., savepoint: _Optional[str] = ..., containing: _Optional[_Iterable[_Union[SavedCheckpoint, _Mapping]]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RestoreStep(_message.Message):
    __slots__ = ("agent_id", "checkpoint_index", "intervals_lost", "checkpoints_lost", "sends_undone", "receives_undone")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_LOST_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_LOST_FIELD_NUMBER: _ClassVar[int]
    SENDS_UNDONE_FIELD_NUMBER: _ClassVar[int]
    RECEIVES_UNDONE_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    checkpoint_index: int
    intervals_lost: int
    checkpoints_lost: _containers.RepeatedScalarFieldContainer[int]
    sends_undone: int
    receives_undone: int
    def __init__(self, agent_id: _Optional[str] = ..., checkpoint_index: _Optional[int] = ..., intervals_lost: _Optional[int] = ..., checkpoints_lost: _Optional[_Iterable[int]] = ..., sends_undone: _Optional[int] = ..., receives_undone: _Optional[int] = ...) -> None: ...

class RestoreGroupResponse(_message.Message):
    __slots__ = ("recovery_id", "steps", "epoch", "dry_run")
    RECOVERY_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    recovery_id: int
    steps: _containers.RepeatedCompositeFieldContainer[RestoreStep]
    epoch: int
    dry_run: bool
    def __init__(self, recovery_id: _Optional[int] = ..., steps: _Optional[_Iterable[_Union[RestoreStep, _Mapping]]] = ..., epoch: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ForkGroupRequest(_message.Message):
    __slots__ = ("request_id", "group", "savepoint", "into", "copies", "agents")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    INTO_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    group: str
    savepoint: str
    into: str
    copies: _containers.RepeatedCompositeFieldContainer[ForkedCheckpoint]
    agents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., group: _Optional[str] = ..., savepoint: _Optional[str] = ..., into: _Optional[str] = ..., copies: _Optional[_Iterable[_Union[ForkedCheckpoint, _Mapping]]] = ..., agents: _Optional[_Iterable[str]] = ...) -> None: ...

class ForkedCheckpoint(_message.Message):
    __slots__ = ("agent_id", "index", "blob_uri")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BLOB_URI_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    index: int
    blob_uri: str
    def __init__(self, agent_id: _Optional[str] = ..., index: _Optional[int] = ..., blob_uri: _Optional[str] = ...) -> None: ...

class ForkGroupResponse(_message.Message):
    __slots__ = ("group", "checkpoints")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    group: Group
    checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointMeta]
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ..., checkpoints: _Optional[_Iterable[_Union[CheckpointMeta, _Mapping]]] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SavedSnapshot(_message.Message):
    __slots__ = ("applied_index", "last_index", "last_term", "size", "node")
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    last_index: int
    last_term: int
    size: int
    node: str
    def __init__(self, applied_index: _Optional[int] = ..., last_index: _Optional[int] = ..., last_term: _Optional[int] = ..., size: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class SaveSnapshotResponse(_message.Message):
    __slots__ = ("saved", "chunk", "sha256")
    SAVED_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    saved: SavedSnapshot
    chunk: bytes
    sha256: str
    def __init__(self, saved: _Optional[_Union[SavedSnapshot, _Mapping]] = ..., chunk: _Optional[bytes] = ..., sha256: _Optional[str] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node", "role", "term", "commit_index", "applied_index", "log_entries", "leader", "last_snapshot_index", "last_snapshot_age_s", "state_digest", "content_digest", "digest_index", "loop_lag_s", "tick_lag_s", "content_layout")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LOG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_S_FIELD_NUMBER: _ClassVar[int]
    TICK_LAG_S_FIELD_NUMBER: _ClassVar[int]
    CONTENT_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    node: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    log_entries: int
    leader: str
    last_snapshot_index: int
    last_snapshot_age_s: float
    state_digest: str
    content_digest: str
    digest_index: int
    loop_lag_s: float
    tick_lag_s: float
    content_layout: int
    def __init__(self, node: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., log_entries: _Optional[int] = ..., leader: _Optional[str] = ..., last_snapshot_index: _Optional[int] = ..., last_snapshot_age_s: _Optional[float] = ..., state_digest: _Optional[str] = ..., content_digest: _Optional[str] = ..., digest_index: _Optional[int] = ..., loop_lag_s: _Optional[float] = ..., tick_lag_s: _Optional[float] = ..., content_layout: _Optional[int] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: NodeStatus
    def __init__(self, node: _Optional[_Union[NodeStatus, _Mapping]] = ...) -> None: ...

class MembershipRequest(_message.Message):
    __slots__ = ("node", "force", "grpc")
    NODE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    GRPC_FIELD_NUMBER: _ClassVar[int]
    node: str
    force: bool
    grpc: str
    def __init__(self, node: _Optional[str] = ..., force: _Optional[bool] = ..., grpc: _Optional[str] = ...) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: str
    def __init__(self, result: _Optional[str] = ...) -> None: ...

class AgentFrame(_message.Message):
    __slots__ = ("correlation", "issued_at", "trace_context", "register", "heartbeat", "commit_checkpoint", "report_dependencies", "ack_order", "deregister", "watch_orders")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CORRELATION_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REPORT_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    ACK_ORDER_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_FIELD_NUMBER: _ClassVar[int]
    WATCH_ORDERS_FIELD_NUMBER: _ClassVar[int]
    correlation: int
    issued_at: str
    trace_context: _containers.ScalarMap[str, str]
    register: RegisterRequest
    heartbeat: HeartbeatRequest
    commit_checkpoint: CommitCheckpointRequest
    report_dependencies: ReportDependenciesRequest
    ack_order: AckOrderRequest
    deregister: DeregisterRequest
    watch_orders: WatchOrdersRequest
    def __init__(self, correlation: _Optional[int] = ..., issued_at: _Optional[str] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., register: _Optional[_Union[RegisterRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatRequest, _Mapping]] = ..., commit_checkpoint: _Optional[_Union[CommitCheckpointRequest, _Mapping]] = ..., report_dependencies: _Optional[_Union[ReportDependenciesRequest, _Mapping]] = ..., ack_order: _Optional[_Union[AckOrderRequest, _Mapping]] = ..., deregister: _Optional[_Union[DeregisterRequest, _Mapping]] = ..., watch_orders: _Optional[_Union[WatchOrdersRequest, _Mapping]] = ...) -> None: ...

class FrameStatus(_message.Message):
    __slots__ = ("code", "reason", "message", "leader", "retry_after_s")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: ReasonCode
    message: str
    leader: str
    retry_after_s: float
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[_Union[ReasonCode, str]] = ..., message: _Optional[str] = ..., leader: _Optional[str] = ..., retry_after_s: _Optional[float] = ...) -> None: ...

class CoordinatorFrame(_message.Message):
    __slots__ = ("correlation", "register", "heartbeat", "commit_checkpoint", "report_dependencies", "ack_order", "deregister", "order", "status")
    CORRELATION_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REPORT_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    ACK_ORDER_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    correlation: int
    register: RegisterResponse
    heartbeat: HeartbeatResponse
    commit_checkpoint: CommitCheckpointResponse
    report_dependencies: ReportDependenciesResponse
    ack_order: AckOrderResponse
    deregister: DeregisterResponse
    order: Order
    status: FrameStatus
    def __init__(self, correlation: _Optional[int] = ..., register: _Optional[_Union[RegisterResponse, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatResponse, _Mapping]] = ..., commit_checkpoint: _Optional[_Union[CommitCheckpointResponse, _Mapping]] = ..., report_dependencies: _Optional[_Union[ReportDependenciesResponse, _Mapping]] = ..., ack_order: _Optional[_Union[AckOrderResponse, _Mapping]] = ..., deregister: _Optional[_Union[DeregisterResponse, _Mapping]] = ..., order: _Optional[_Union[Order, _Mapping]] = ..., status: _Optional[_Union[FrameStatus, _Mapping]] = ...) -> None: ...
