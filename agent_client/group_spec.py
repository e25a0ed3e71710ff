"""The group options a user names in words, turned into the coordinator's GroupSpec.

One table of mode names for the sync and asyncio sessions, so `mode="bcs"` means the
same everywhere and a missing or misspelt mode is refused before anything is sent
(the coordinator would otherwise read an unset mode as "coordinated").
"""
from __future__ import annotations

import uuid

from coordinator.api.v1 import coordinator_pb2 as pb

MODES: dict[str, pb.GroupMode] = {
    "coordinated": pb.COORDINATED,
    "bcs": pb.CIC_BCS,
    "hmnr": pb.CIC_HMNR,
    "fdas": pb.CIC_FDAS,
    "uncoordinated": pb.UNCOORDINATED,
}


class GroupNotFound(LookupError):
    """The group does not exist and the caller did not ask to create it."""


def mode_value(mode: str | None) -> pb.GroupMode:
    """The proto enum for a mode name; a clear ValueError for None or an unknown name."""
    if mode is None:
        raise ValueError(f"creating a group needs mode=, one of: {', '.join(MODES)}")
    try:
        return MODES[mode.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown mode {mode!r}; one of: {', '.join(MODES)}") from None


def check_mode(name: str, mode: str | None, actual: int) -> int:
    """An existing group's mode, after checking it is the one the caller named (if any):
    code written for one mode must not run silently in a group of another."""
    if mode is not None and mode_value(mode) != actual:
        named = next((k for k, v in MODES.items() if v == actual), str(actual))
        raise ValueError(f"group {name!r} exists in mode {named!r}, not {mode!r}")
    return actual


def create_request(name: str, mode: str | None, *, lease_ttl_s: float | None = None,
                   retention: int | None = None, checkpoint_interval_s: float | None = None) -> pb.CreateGroupRequest:
    """CreateGroup with a fresh request id. Creating is idempotent on the coordinator
    (the same spec again is answered with the group), so a new id per call is safe."""
    spec = pb.GroupSpec(group=name, mode=mode_value(mode))
    if lease_ttl_s is not None:
        spec.lease_ttl_s = lease_ttl_s
    if retention is not None:
        spec.retention = retention
    if checkpoint_interval_s is not None:
        spec.checkpoint_interval_s = checkpoint_interval_s
    return pb.CreateGroupRequest(request_id=f"create-{name}-{uuid.uuid4().hex[:16]}", spec=spec)


def get_request(name: str) -> pb.GetGroupRequest:
    return pb.GetGroupRequest(group=name)
