"""Checkpoint metadata crosses the wire with every field, and only the agent's own."""
from __future__ import annotations

import dataclasses

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.model import Checkpoint, CheckpointKind


def test_the_proto_and_the_core_checkpoint_have_the_same_fields() -> None:
    assert {f.name for f in pb.CheckpointMeta.DESCRIPTOR.fields} == {f.name for f in dataclasses.fields(Checkpoint)}


def test_a_checkpoint_round_trips_except_what_the_coordinator_assigns() -> None:
    stored = Checkpoint("g", "a", 3, 2, CheckpointKind.FORCED, "file:///b/3", "ab" * 32, 10, schema_version=4,
                        config_hash="h", dependency_versions={"z": "1", "numpy": "2"}, parent_index=1,
                        channel_state_uri="file:///c/3", created_at=5.5, incarnation=7, stable=True)
    decoded = wire.checkpoint_from_pb(wire.checkpoint_to_pb(stored))
    assert decoded == dataclasses.replace(stored, created_at=0.0, incarnation=0, stable=False)
    assert list(decoded.dependency_versions) == ["numpy", "z"]  # one order on every replica
