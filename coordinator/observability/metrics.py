"""Prometheus metrics of a coordinator node (prometheus-client, default registry)."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RAFT_ROLE = Gauge("raftpoint_raft_role", "1 for the node's current Raft role", ["role"])
RAFT_TERM = Gauge("raftpoint_raft_term", "Current Raft term")
COMMIT_INDEX = Gauge("raftpoint_raft_commit_index", "Raft commit index")
APPLIED_INDEX = Gauge("raftpoint_applied_index", "Highest log index durably applied to the store")
LOG_ENTRIES = Gauge("raftpoint_raft_log_entries", "Entries in the Raft journal (shrinks on compaction)")
SNAPSHOT_AGE = Gauge("raftpoint_snapshot_age_seconds", "Seconds since the last snapshot was written or loaded")
SNAPSHOT_BYTES = Gauge("raftpoint_snapshot_bytes", "Size of the last snapshot file")
APPLY_SECONDS = Histogram("raftpoint_apply_seconds", "Time to apply one log entry",
                          buckets=(5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1))
RPC_SECONDS = Histogram("raftpoint_rpc_seconds", "gRPC handling time", ["method", "code"],
                        buckets=(5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5, 2.5, 10))
EPOCHS = Counter("raftpoint_epochs_total", "Coordinated epochs by outcome", ["outcome"])
CHECKPOINTS = Counter("raftpoint_checkpoints_total", "Committed checkpoints by kind", ["kind"])
ROLLBACK_DEPTH = Histogram("raftpoint_rollback_intervals", "Intervals lost per agent rolled back",
                           buckets=(0, 1, 2, 5, 10, 20, 50, 100))
RECOVERIES = Counter("raftpoint_recoveries_total", "Recovery lines computed")
GC_BYTES = Counter("raftpoint_gc_bytes_total", "Checkpoint bytes made collectable")

_ROLES = ("leader", "follower", "candidate")


def update_node_gauges(status: dict) -> None:
    for role in _ROLES:
        RAFT_ROLE.labels(role).set(1 if status.get("role") == role else 0)
    RAFT_TERM.set(status.get("term", 0))
    COMMIT_INDEX.set(status.get("commit_index", 0))
    APPLIED_INDEX.set(status.get("applied_index", 0))
    LOG_ENTRIES.set(status.get("log_entries", 0))
    SNAPSHOT_AGE.set(status.get("last_snapshot_age_s", -1))
    SNAPSHOT_BYTES.set(status.get("last_snapshot_bytes", 0))


def start_metrics_server(address: str) -> None:
    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host)
