"""Typed rejections returned (never raised across the Raft apply boundary) by the core.

A command that fails validation must be answered, recorded under its request id
and leave the state untouched; the same rejection therefore has to be a value that
can be encoded in the dedupe table and mapped to a gRPC status by the transport.

Every rejection names its kind (`ReasonCode`) besides the human-readable text, so
a client decides what to do from the code and never has to parse the text, which
stays free to change. Each kind belongs to exactly one status `Code`.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    INTERNAL = "INTERNAL"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"


class ReasonCode(StrEnum):
    """Why a request was refused; mirrored one-to-one by proto/v1's ReasonCode
    (REASON_<name>), which is what clients see. Values are stored in the dedupe
    table, so a member's value must never change once released."""

    UNSPECIFIED = "UNSPECIFIED"  # stored before reasons existed, or not the coordinator's own refusal
    # INVALID_ARGUMENT
    INVALID_FIELD = "INVALID_FIELD"  # a field breaks a format or range rule; `field` names it
    MALFORMED_ENTRY = "MALFORMED_ENTRY"  # a log entry that carries no (or an unknown, or a nested) command
    WRONG_CHECKPOINT_KIND = "WRONG_CHECKPOINT_KIND"  # the group's mode takes other checkpoint kinds
    ORDER_NOT_ADDRESSED = "ORDER_NOT_ADDRESSED"  # acknowledging another agent's order
    CLOCK_AHEAD = "CLOCK_AHEAD"  # issued further ahead of the coordinator's clock than the dedupe window
    # NOT_FOUND
    GROUP_NOT_FOUND = "GROUP_NOT_FOUND"
    AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
    EPOCH_NOT_FOUND = "EPOCH_NOT_FOUND"
    SAVEPOINT_NOT_FOUND = "SAVEPOINT_NOT_FOUND"
    # ALREADY_EXISTS
    GROUP_SPEC_CONFLICT = "GROUP_SPEC_CONFLICT"  # the group exists with a different spec
    CHECKPOINT_CONFLICT = "CHECKPOINT_CONFLICT"  # the checkpoint index exists with other metadata
    ALREADY_COMMITTED = "ALREADY_COMMITTED"  # the agent already committed this epoch
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"  # this identity used the request id for another command
    SAVEPOINT_EXISTS = "SAVEPOINT_EXISTS"  # the group has a savepoint of that name
    GROUP_EXISTS = "GROUP_EXISTS"  # a fork's new group exists already
    # FAILED_PRECONDITION
    STALE_INCARNATION = "STALE_INCARNATION"  # the token's incarnation is not the agent's live one
    AGENT_NOT_ALIVE = "AGENT_NOT_ALIVE"  # the agent failed or left: register again
    EPOCH_NOT_STARTED = "EPOCH_NOT_STARTED"  # the token names an epoch the group has not started
    ORDER_PENDING = "ORDER_PENDING"  # a rollback order must be obeyed and acknowledged first
    INDEX_NOT_ABOVE_LAST = "INDEX_NOT_ABOVE_LAST"  # checkpoint indexes only grow
    PARENT_MISSING = "PARENT_MISSING"  # an incremental checkpoint's parent does not exist
    NOT_OPEN_EPOCH = "NOT_OPEN_EPOCH"  # a coordinated checkpoint for an epoch that is not open
    JOINED_AFTER_EPOCH = "JOINED_AFTER_EPOCH"  # the agent is not a member of that epoch
    ORPHAN_MESSAGE = "ORPHAN_MESSAGE"  # a dependency on a send that a rollback undid
    NOT_COORDINATED = "NOT_COORDINATED"  # epochs exist only in coordinated groups
    GROUP_RECOVERING = "GROUP_RECOVERING"  # not while a recovery is in progress
    EPOCH_STILL_OPEN = "EPOCH_STILL_OPEN"  # one epoch at a time
    NO_LIVE_MEMBERS = "NO_LIVE_MEMBERS"  # an epoch needs members
    REQUEST_TOO_OLD = "REQUEST_TOO_OLD"  # its answer may be forgotten: the outcome is unknown
    MEMBERSHIP_CHANGE_REFUSED = "MEMBERSHIP_CHANGE_REFUSED"  # Raft refused it (one change at a time)
    GROUP_IN_USE = "GROUP_IN_USE"  # a group with live agents is not deleted: deregister them first
    NODE_NOT_READY = "NODE_NOT_READY"  # AddNode: the node does not answer with the cluster's password, or is not waiting to join
    TOO_FEW_VOTERS = "TOO_FEW_VOTERS"  # RemoveNode would leave fewer than 3 voters (unless forced)
    TOO_FEW_LIVE_VOTERS = "TOO_FEW_LIVE_VOTERS"  # RemoveNode would leave fewer live voters than a quorum (unless forced)
    NO_CONSISTENT_CUT = "NO_CONSISTENT_CUT"  # a savepoint needs a stable epoch, or a stable checkpoint in its cut
    NO_RESTORE_LINE = "NO_RESTORE_LINE"  # no consistent global checkpoint contains the checkpoints a restore names
    RESTORE_UNDOES_SAVEPOINT = "RESTORE_UNDOES_SAVEPOINT"  # a restore would delete checkpoints another savepoint holds
    # RESOURCE_EXHAUSTED
    DEPENDENCY_QUOTA = "DEPENDENCY_QUOTA"  # the agent holds its most dependency records until GC drops some
    OVERLOADED = "OVERLOADED"  # the node sheds load: retry after the hint (never stored: decided before proposing)
    # INTERNAL
    INTERNAL_ERROR = "INTERNAL_ERROR"  # a bug in the state machine; nothing was written
    # UNAUTHENTICATED
    UNAUTHENTICATED = "UNAUTHENTICATED"  # no credentials, or ones that name no known identity
    # PERMISSION_DENIED
    ROLE_FORBIDS = "ROLE_FORBIDS"  # the caller's role (or lack of one) does not allow this RPC
    FOREIGN_AGENT = "FOREIGN_AGENT"  # an agent identity acting outside its group or agent-id pattern
    WRONG_AGENT_SECRET = "WRONG_AGENT_SECRET"  # not the secret the agent registered with

    @property
    def code(self) -> Code:
        """The status every refusal of this kind gets (UNSPECIFIED has none)."""
        try:
            return _STATUS[self]
        except KeyError:
            raise ValueError(f"{self} names no kind of refusal") from None


_STATUS: dict[ReasonCode, Code] = {
    **dict.fromkeys((ReasonCode.INVALID_FIELD, ReasonCode.MALFORMED_ENTRY, ReasonCode.WRONG_CHECKPOINT_KIND,
                     ReasonCode.ORDER_NOT_ADDRESSED, ReasonCode.CLOCK_AHEAD), Code.INVALID_ARGUMENT),
    **dict.fromkeys((ReasonCode.GROUP_NOT_FOUND, ReasonCode.AGENT_NOT_FOUND, ReasonCode.EPOCH_NOT_FOUND,
                     ReasonCode.SAVEPOINT_NOT_FOUND),
                    Code.NOT_FOUND),
    **dict.fromkeys((ReasonCode.GROUP_SPEC_CONFLICT, ReasonCode.CHECKPOINT_CONFLICT, ReasonCode.ALREADY_COMMITTED,
                     ReasonCode.REQUEST_ID_REUSED, ReasonCode.SAVEPOINT_EXISTS, ReasonCode.GROUP_EXISTS),
                    Code.ALREADY_EXISTS),
    **dict.fromkeys((ReasonCode.STALE_INCARNATION, ReasonCode.AGENT_NOT_ALIVE, ReasonCode.EPOCH_NOT_STARTED,
                     ReasonCode.ORDER_PENDING, ReasonCode.INDEX_NOT_ABOVE_LAST, ReasonCode.PARENT_MISSING,
                     ReasonCode.NOT_OPEN_EPOCH, ReasonCode.JOINED_AFTER_EPOCH, ReasonCode.ORPHAN_MESSAGE,
                     ReasonCode.NOT_COORDINATED, ReasonCode.GROUP_RECOVERING, ReasonCode.EPOCH_STILL_OPEN,
                     ReasonCode.NO_LIVE_MEMBERS, ReasonCode.REQUEST_TOO_OLD, ReasonCode.MEMBERSHIP_CHANGE_REFUSED,
                     ReasonCode.GROUP_IN_USE, ReasonCode.NODE_NOT_READY, ReasonCode.TOO_FEW_VOTERS,
                     ReasonCode.TOO_FEW_LIVE_VOTERS, ReasonCode.NO_CONSISTENT_CUT,
                     ReasonCode.NO_RESTORE_LINE, ReasonCode.RESTORE_UNDOES_SAVEPOINT),
                    Code.FAILED_PRECONDITION),
    ReasonCode.DEPENDENCY_QUOTA: Code.RESOURCE_EXHAUSTED,
    ReasonCode.OVERLOADED: Code.RESOURCE_EXHAUSTED,
    ReasonCode.INTERNAL_ERROR: Code.INTERNAL,
    ReasonCode.UNAUTHENTICATED: Code.UNAUTHENTICATED,
    **dict.fromkeys((ReasonCode.ROLE_FORBIDS, ReasonCode.FOREIGN_AGENT, ReasonCode.WRONG_AGENT_SECRET),
                    Code.PERMISSION_DENIED),
}


SHOWN_CHARS = 64


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A refused value as a refusal's text quotes it: its repr, cut to `limit` characters.

    Refusals are sent to the client and logged; quoting a 4 MB bad value whole made
    one bad request one 4 MB log line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Rejection(Exception):
    """Raised inside the core, caught by apply() and turned into a result.

    Build one with because() (or invalid()/not_found()), which derives `code` from
    the reason code, so the two cannot disagree."""

    code: Code
    reason: str
    field: str = ""
    reason_code: ReasonCode = ReasonCode.UNSPECIFIED

    def __post_init__(self) -> None:
        if self.reason_code is not ReasonCode.UNSPECIFIED and self.reason_code.code is not self.code:
            raise ValueError(f"reason {self.reason_code} is a {self.reason_code.code} refusal, not {self.code}")

    def __str__(self) -> str:
        return f"{self.code}: {self.field + ': ' if self.field else ''}{self.reason}"

    @classmethod
    def because(cls, reason_code: ReasonCode, reason: str, field: str = "") -> "Rejection":
        return cls(reason_code.code, reason, field, reason_code)

    @classmethod
    def invalid(cls, field: str, reason: str) -> "Rejection":
        return cls.because(ReasonCode.INVALID_FIELD, reason, field)

    @classmethod
    def not_found(cls, what: str, reason_code: ReasonCode) -> "Rejection":
        return cls.because(reason_code, f"{what} does not exist")
