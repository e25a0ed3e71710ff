from __future__ import annotations

import pytest

from coordinator.core import codec
from coordinator.core.model import Checkpoint, CheckpointKind, Group, GroupSpec, Mode


def test_round_trip_and_canonical_bytes() -> None:
    group = Group(spec=GroupSpec("g", Mode.CIC_HMNR, retention=3), members=("a", "b"), current_epoch=7)
    data = codec.encode(group)
    assert codec.decode(Group, data) == group
    assert codec.encode(codec.decode(Group, data)) == data
    cp1 = Checkpoint("g", "a", 1, 0, CheckpointKind.BASIC, "file:///x", "0" * 64, 10,
                     dependency_versions={"b": "2", "a": "1"})
    cp2 = Checkpoint("g", "a", 1, 0, CheckpointKind.BASIC, "file:///x", "0" * 64, 10,
                     dependency_versions={"a": "1", "b": "2"})
    assert codec.encode(cp1) == codec.encode(cp2)  # dict order does not leak into replicas' bytes


def test_unknown_schema_version_is_refused() -> None:
    with pytest.raises(ValueError, match="schema version"):
        codec.decode(Group, b'{"v": 99, "d": {}}')
