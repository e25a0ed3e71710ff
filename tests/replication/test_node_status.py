"""A replica's status is one typed NodeStatus, and ClusterStatus carries every field the message has."""
from __future__ import annotations

import dataclasses

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.in_process import InProcessCoordinator, LocalReplica
from coordinator.harness.local_cluster import node_status
from coordinator.replication.replica import NodeStatus

# Distinct values, so a field copied into the wrong place or not at all shows.
DISTINCT = NodeStatus(node="n-1", role="leader", term=3, commit_index=11, applied_index=12, raft_applied_index=13,
                      log_entries=14, leader="n-1", has_quorum=True, last_snapshot_index=15,
                      last_snapshot_age_s=1.5, last_snapshot_bytes=16, tick_lag_s=0.25)


def test_status_is_frozen() -> None:
    status = LocalReplica("127.0.0.1:1").status()
    assert isinstance(status, NodeStatus) and status.role == "leader" and status.leader == status.node
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.term = 2  # type: ignore[misc]


def test_cluster_status_carries_every_shared_field(monkeypatch: pytest.MonkeyPatch) -> None:
    shared = {f.name for f in dataclasses.fields(NodeStatus)} & set(pb.NodeStatus.DESCRIPTOR.fields_by_name)
    assert shared == {"node", "role", "term", "commit_index", "applied_index", "log_entries", "leader",
                      "last_snapshot_index", "last_snapshot_age_s", "tick_lag_s"}
    with InProcessCoordinator() as coordinator:
        monkeypatch.setattr(coordinator.replica, "status", lambda: DISTINCT)
        answer = node_status(coordinator.address, timeout=5.0, tls=coordinator.client_tls())
    assert answer is not None
    assert {name: getattr(answer, name) for name in shared} == {name: getattr(DISTINCT, name) for name in shared}
