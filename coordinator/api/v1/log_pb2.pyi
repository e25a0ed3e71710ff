from coordinator.api.v1 import coordinator_pb2 as _coordinator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeclareAgentFailed(_message.Message):
    __slots__ = ("group", "agent_id", "incarnation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    agent_id: str
    incarnation: int
    def __init__(self, group: _Optional[str] = ..., agent_id: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...

class AbortEpoch(_message.Message):
    __slots__ = ("group", "epoch", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch: int
    reason: str
    def __init__(self, group: _Optional[str] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ReadBarrier(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Batch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("identity", "role", "group", "pattern")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    identity: str
    role: str
    group: str
    pattern: str
    def __init__(self, identity: _Optional[str] = ..., role: _Optional[str] = ..., group: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class LogEntry(_message.Message):
    __slots__ = ("request_id", "proposed_at", "issued_at", "dedupe_window_s", "principal", "create_group", "register", "commit_checkpoint", "report_dependencies", "start_epoch", "declare_agent_failed", "ack_order", "deregister", "abort_epoch", "garbage_collect", "read_barrier", "batch", "delete_group", "reset_dedupe_clock", "create_savepoint", "delete_savepoint", "set_retention", "restore_group", "fork_group")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_GROUP_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    COMMIT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REPORT_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    START_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DECLARE_AGENT_FAILED_FIELD_NUMBER: _ClassVar[int]
    ACK_ORDER_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_FIELD_NUMBER: _ClassVar[int]
    ABORT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GARBAGE_COLLECT_FIELD_NUMBER: _ClassVar[int]
    READ_BARRIER_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    DELETE_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESET_DEDUPE_CLOCK_FIELD_NUMBER: _ClassVar[int]
    CREATE_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    DELETE_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    SET_RETENTION_FIELD_NUMBER: _ClassVar[int]
    RESTORE_GROUP_FIELD_NUMBER: _ClassVar[int]
    FORK_GROUP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    proposed_at: float
    issued_at: float
    dedupe_window_s: float
    principal: Principal
    create_group: _coordinator_pb2.CreateGroupRequest
    register: _coordinator_pb2.RegisterRequest
    commit_checkpoint: _coordinator_pb2.CommitCheckpointRequest
    report_dependencies: _coordinator_pb2.ReportDependenciesRequest
    start_epoch: _coordinator_pb2.StartEpochRequest
    declare_agent_failed: DeclareAgentFailed
    ack_order: _coordinator_pb2.AckOrderRequest
    deregister: _coordinator_pb2.DeregisterRequest
    abort_epoch: AbortEpoch
    garbage_collect: _coordinator_pb2.GarbageCollectRequest
    read_barrier: ReadBarrier
    batch: Batch
    delete_group: _coordinator_pb2.DeleteGroupRequest
    reset_dedupe_clock: _coordinator_pb2.ResetDedupeClockRequest
    create_savepoint: _coordinator_pb2.CreateSavepointRequest
    delete_savepoint: _coordinator_pb2.DeleteSavepointRequest
    set_retention: _coordinator_pb2.SetRetentionRequest
    restore_group: _coordinator_pb2.RestoreGroupRequest
    fork_group: _coordinator_pb2.ForkGroupRequest
    def __init__(self, request_id: _Optional[str] = ..., proposed_at: _Optional[float] = ..., issued_at: _Optional[float] = ..., dedupe_window_s: _Optional[float] = ..., principal: _Optional[_Union[Principal, _Mapping]] = ..., create_group: _Optional[_Union[_coordinator_pb2.CreateGroupRequest, _Mapping]] = ..., register: _Optional[_Union[_coordinator_pb2.RegisterRequest, _Mapping]] = ..., commit_checkpoint: _Optional[_Union[_coordinator_pb2.CommitCheckpointRequest, _Mapping]] = ..., report_dependencies: _Optional[_Union[_coordinator_pb2.ReportDependenciesRequest, _Mapping]] = ..., start_epoch: _Optional[_Union[_coordinator_pb2.StartEpochRequest, _Mapping]] = ..., declare_agent_failed: _Optional[_Union[DeclareAgentFailed, _Mapping]] = ..., ack_order: _Optional[_Union[_coordinator_pb2.AckOrderRequest, _Mapping]] = ..., deregister: _Optional[_Union[_coordinator_pb2.DeregisterRequest, _Mapping]] = ..., abort_epoch: _Optional[_Union[AbortEpoch, _Mapping]] = ..., garbage_collect: _Optional[_Union[_coordinator_pb2.GarbageCollectRequest, _Mapping]] = ..., read_barrier: _Optional[_Union[ReadBarrier, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., delete_group: _Optional[_Union[_coordinator_pb2.DeleteGroupRequest, _Mapping]] = ..., reset_dedupe_clock: _Optional[_Union[_coordinator_pb2.ResetDedupeClockRequest, _Mapping]] = ..., create_savepoint: _Optional[_Union[_coordinator_pb2.CreateSavepointRequest, _Mapping]] = ..., delete_savepoint: _Optional[_Union[_coordinator_pb2.DeleteSavepointRequest, _Mapping]] = ..., set_retention: _Optional[_Union[_coordinator_pb2.SetRetentionRequest, _Mapping]] = ..., restore_group: _Optional[_Union[_coordinator_pb2.RestoreGroupRequest, _Mapping]] = ..., fork_group: _Optional[_Union[_coordinator_pb2.ForkGroupRequest, _Mapping]] = ...) -> None: ...
