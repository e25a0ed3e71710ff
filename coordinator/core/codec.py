"""Canonical, versioned JSON encoding of the core's dataclasses.

Every replica must produce byte-identical values for identical state (the content
digest compares them), so keys are sorted and floats use repr. JSON rather than
pickle: stored state is never executable, and readable with standard tools.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
SCHEMA_VERSION = 1


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


def encode(value: Any) -> bytes:
    return json.dumps({"v": SCHEMA_VERSION, "d": to_plain(value)}, sort_keys=True, separators=(",", ":")).encode()


def decode(cls: type[T], data: bytes) -> T:
    doc = json.loads(data)
    if doc.get("v") != SCHEMA_VERSION:
        raise ValueError(f"unsupported record schema version {doc.get('v')!r} for {cls.__name__}")
    return from_plain(cls, doc["d"])


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_plain(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return tp(**{f.name: from_plain(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value})
    if origin is tuple:
        (item,) = {a for a in typing.get_args(tp) if a is not Ellipsis}
        return tuple(from_plain(item, v) for v in value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [from_plain(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(tp)
        return {k: from_plain(item, v) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return from_plain(inner, value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if tp is float:
        return float(value)
    return value
