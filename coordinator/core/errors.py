"""Typed rejections returned (never raised across the Raft apply boundary) by the core.

A command that fails validation must be answered, recorded under its request id
and leave the state untouched; the same rejection therefore has to be a value that
can be encoded in the dedupe table and mapped to a gRPC status by the transport.
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


@dataclass(frozen=True)
class Rejection(Exception):
    """Raised inside the core, caught by apply() and turned into a result."""

    code: Code
    reason: str
    field: str = ""

    def __str__(self) -> str:
        return f"{self.code}: {self.field + ': ' if self.field else ''}{self.reason}"

    @classmethod
    def invalid(cls, field: str, reason: str) -> "Rejection":
        return cls(Code.INVALID_ARGUMENT, reason, field)

    @classmethod
    def not_found(cls, what: str) -> "Rejection":
        return cls(Code.NOT_FOUND, f"{what} does not exist")

    @classmethod
    def precondition(cls, reason: str, field: str = "") -> "Rejection":
        return cls(Code.FAILED_PRECONDITION, reason, field)
