"""Canonical, versioned JSON encoding of the core's dataclasses.

Every replica must produce byte-identical values for identical state (the content
digest compares them), so keys are sorted and floats use repr. JSON rather than
pickle: stored state is never executable, and readable with standard tools.
Encoders and decoders are compiled once per type: this runs for every record an
applied entry touches, on the Raft thread.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from functools import cache
from typing import Any, Callable, TypeVar

T = TypeVar("T")
SCHEMA_VERSION = 1
_PRIMITIVES = (str, int, bool, type(None))
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _identity(value: Any) -> Any:
    return value


@cache
def _encoder(tp: Any) -> Callable[[Any], Any]:
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = [(f.name, _encoder(hints[f.name])) for f in dataclasses.fields(tp)]
        return lambda v: {name: enc(getattr(v, name)) for name, enc in fields}
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        item = _encoder(next(a for a in typing.get_args(tp) if a is not Ellipsis))
        return (lambda v: list(v)) if item is _identity else (lambda v: [item(x) for x in v])
    if origin in (typing.Union, types.UnionType):
        inner = _encoder(next(a for a in typing.get_args(tp) if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return lambda v: v.value
    return _identity  # str, int, bool, float, dict[str, str]


@cache
def _decoder(tp: Any) -> Callable[[Any], Any]:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = [(f.name, _decoder(hints[f.name])) for f in dataclasses.fields(tp)]
        return lambda v: tp(**{name: dec(v[name]) for name, dec in fields if name in v})
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        item = _decoder(next(a for a in typing.get_args(tp) if a is not Ellipsis))
        if item is _identity:
            return tuple if origin is tuple else list
        return (lambda v: tuple(item(x) for x in v)) if origin is tuple else (lambda v: [item(x) for x in v])
    if origin is dict:
        return dict
    if origin in (typing.Union, types.UnionType):
        inner = _decoder(next(a for a in typing.get_args(tp) if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp
    if tp is float:
        return float
    return _identity


def to_plain(value: Any) -> Any:
    tp: Any = type(value)  # a type is hashable, which mypy cannot see through type[Any]
    return _encoder(tp)(value)


def encode(value: Any) -> bytes:
    return _dumps({"v": SCHEMA_VERSION, "d": to_plain(value)}).encode()


def decode(cls: type[T], data: bytes) -> T:
    doc = json.loads(data)
    if doc.get("v") != SCHEMA_VERSION:
        raise ValueError(f"unsupported record schema version {doc.get('v')!r} for {cls.__name__}")
    tp: Any = cls  # as in to_plain
    return _decoder(tp)(doc["d"])
