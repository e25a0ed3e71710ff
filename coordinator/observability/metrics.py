"""Prometheus metrics of a coordinator node (prometheus-client, one module-level registry).

Why module-level: every part of a node (Raft node, gRPC interceptors, leader loop)
records into the same process-wide metrics without passing a registry around,
and one HTTP endpoint (observability.metrics_server) serves them all. The default registry is used so the
client library's process and platform collectors (CPU, memory, open fds) come
along for free. Labelled series are created up front so a counter that has not
moved yet is exported as 0 rather than missing (dashboards and rate() need it).
"""
from __future__ import annotations

from typing import Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from coordinator.core.connection_caps import FULL, PER_SOURCE
from coordinator.core.membership import EVENT_KINDS as RAFT_EVENT_KINDS

__all__ = [
    "REGISTRY", "RAFT_ROLE", "RAFT_TERM", "COMMIT_INDEX", "APPLIED_INDEX", "LOG_ENTRIES", "SNAPSHOT_AGE",
    "SNAPSHOT_BYTES", "APPLY_SECONDS", "JOURNAL_FSYNC_SECONDS", "RPC_SECONDS", "EPOCHS", "CHECKPOINTS", "FORCED_CHECKPOINTS",
    "USELESS_CHECKPOINTS", "ROLLBACK_DEPTH", "RECOVERIES", "GC_BYTES", "RAFT_EVENTS", "MEMBERSHIP_REQUESTS", "RAFT_VOTERS", "RAFT_LIVE_VOTERS",
    "RAFT_CONNECTIONS_REFUSED", "RAFT_MESSAGES_SENT", "RAFT_TICKS", "GRPC_CONNECTIONS", "GRPC_CONNECTIONS_REFUSED", "LOOP_LAG", "TICK_LAG", "SHED",
    "LEASE_CREDIT_SECONDS", "TLS_CERT_EXPIRY", "DIGEST_DIVERGED_PEERS", "PROPOSAL_SECONDS", "LIVE_AGENTS",
    "AGENTS_DECLARED_FAILED", "ROLLBACK_DELIVERY_SECONDS", "record_checkpoint", "update_node_gauges",
]

ROLES = ("leader", "follower", "candidate")
EPOCH_OUTCOMES = ("started", "stable", "aborted")
CHECKPOINT_KINDS = ("initial", "basic", "forced", "coordinated")
LEASE_KINDS = ("session", "keepalive")

# ---- Raft and store (copied from Replica.status() by update_node_gauges) ----------
RAFT_ROLE = Gauge("raftpoint_raft_role", "1 for the node's current Raft role, 0 for the others", ["role"])
RAFT_TERM = Gauge("raftpoint_raft_term", "Current Raft term")
COMMIT_INDEX = Gauge("raftpoint_raft_commit_index", "Raft commit index")
APPLIED_INDEX = Gauge("raftpoint_applied_index", "Highest log index durably applied to the store")
LOG_ENTRIES = Gauge("raftpoint_raft_log_entries", "Entries in the Raft journal (shrinks on compaction)")
SNAPSHOT_AGE = Gauge("raftpoint_snapshot_age_seconds", "Seconds since the last snapshot was written or loaded "
                     "(-1: none yet)")
AUTH_FILE_UNUSABLE = Gauge("raftpoint_auth_file_unusable", "1 while an auth file (bindings or tokens) as it is now "
                           "cannot be read or parsed and its last good version stays in force", ["file"])
TLS_FILES_UNUSABLE = Gauge("raftpoint_tls_files_unusable", "1 while the node's TLS files as they are now are not "
                           "served (unusable, or a certificate that would fail handshakes the served one passes) "
                           "and the last good certificate stays in force")
TLS_CERT_EXPIRY = Gauge("raftpoint_tls_certificate_expiry_timestamp_seconds", "When the certificate this node "
                        "serves (certificate=\"node\") and the earliest of its client CA file's certificates "
                        "(certificate=\"client_ca\") expire, Unix seconds", ["certificate"])
DIGEST_DIVERGED = Gauge("raftpoint_digest_diverged", "1 once this node found its store's digest differs from "
                        "the majority's at an applied index (it then stops)")
DIGEST_DIVERGED_PEERS = Gauge("raftpoint_digest_diverged_peers", "Peers whose store digest differs from the "
                              "majority's at an applied index, among the samples this node's digest audit keeps: "
                              "a diverged node stops itself, so its peers are the ones left to say so")
SNAPSHOT_BYTES = Gauge("raftpoint_snapshot_bytes", "Size of the last snapshot file")
RAFT_VOTERS = Gauge("raftpoint_raft_voters", "Raft voters in this node's configuration, itself included")
RAFT_LIVE_VOTERS = Gauge("raftpoint_raft_live_voters", "Voters this node has a live connection to, itself "
                         "included: below a quorum of raftpoint_raft_voters the cluster cannot commit")
RAFT_EVENTS = Counter("raftpoint_raft_events_total", "Raft events seen by this node by kind (term_changed, "
                      "election_won, election_lost, stepped_down, member_added, member_removed)", ["kind"])
MEMBERSHIP_REQUESTS = Counter("raftpoint_membership_requests_total", "AddNode/RemoveNode calls on this node by "
                              "action (add, remove) and outcome (done, or the refusal's reason code)",
                              ["action", "outcome"])
RAFT_CONNECTIONS_REFUSED = Counter("raftpoint_raft_connections_refused_total", "Incoming Raft connections "
                                   "closed before authenticating, by reason (oversized, idle, unnamed, "
                                   "per_source)", ["reason"])
RAFT_FRAMES_REFUSED = Counter("raftpoint_raft_frames_refused_total", "Raft connections closed because a peer "
                              "that had authenticated sent a frame that must not be read, by reason (link_frame: "
                              "forged, tampered, replayed or reordered; fernet_after_link; not_offered)", ["reason"])
RAFT_MESSAGES_SENT = Counter("raftpoint_raft_messages_sent_total", "Raft messages this node sent, by message type "
                             "(append_entries, next_node_idx, request_vote, ...; key_exchange) and framing (link_v1: "
                             "AES-GCM; fernet: pysyncobj's, used with peers of an older version and for the key "
                             "exchange)", ["type", "framing"])
RAFT_TICKS = Counter("raftpoint_raft_ticks_total", "Times the Raft thread woke up and ran its tick")
CONNECTION_STATES = ("authenticated", "unauthenticated")
CONNECTION_REFUSALS = (PER_SOURCE, FULL)
GRPC_CONNECTIONS = Gauge("raftpoint_grpc_connections", "Client connections open on the gRPC port, by whether they "
                         "have made an authenticated call yet", ["state"])
GRPC_CONNECTIONS_REFUSED = Counter("raftpoint_grpc_connections_refused_total", "Connections to the gRPC port reset "
                                   "at accept, by reason (per_source: the address holds its share of "
                                   "unauthenticated connections; full: no slot it may take)", ["reason"])

# ---- latency ----------------------------------------------------------------------
APPLY_SECONDS = Histogram("raftpoint_apply_seconds", "Time to apply one log entry",
                          buckets=(5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1))
PROPOSAL_SECONDS = Histogram("raftpoint_proposal_seconds", "Time from a command's proposal on the leader to its "
                             "result (journaled by a majority, committed and applied): the commit latency every "
                             "write waits for", buckets=(1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1,
                                                         2.5, 10))
JOURNAL_FSYNC_SECONDS = Histogram("raftpoint_journal_fsync_seconds",
                                  "Time to make the Raft journal durable (one fdatasync per group of entries); "
                                  "every Raft message waits for it, so a slow disk shows here first",
                                  buckets=(1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5))
RPC_SECONDS = Histogram("raftpoint_rpc_seconds", "gRPC handling time by method and status code", ["method", "code"],
                        buckets=(5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5, 2.5, 10))

# ---- overload (core.overload) ------------------------------------------------------
CLOCK_AHEAD_OF_VOTERS = Gauge("raftpoint_clock_ahead_of_voters_seconds", "How far this leader's wall clock is "
                              "ahead of the time a majority of the voters' clocks have reached, while its proposals "
                              "are held to theirs (0 otherwise): check this node's clock")
GC_PAUSE = Gauge("raftpoint_gc_pause_seconds", "Longest garbage-collector pause of the interpreter within the "
                 "last minute: it stalls the event loop and the Raft thread alike")
LOOP_LAG = Gauge("raftpoint_event_loop_lag_seconds", "Worst lateness of the event loop over the last second "
                 "(a short sleep's overshoot); past a few hundred ms the node sheds load")
TICK_LAG = Gauge("raftpoint_raft_tick_lag_seconds", "Worst lateness of the Raft thread's tick against its intended "
                 "period over the last second; near the election timeout, followers depose the leader")
SHED = Counter("raftpoint_shed_total", "Calls refused with RESOURCE_EXHAUSTED (REASON_OVERLOADED) before any work, "
               "by kind of work (read, write, keepalive: shed in that order)", ["work"])
LEASE_CREDIT_SECONDS = Counter("raftpoint_lease_credit_seconds_total",
                               "Seconds added to every agent lease because the leader lagged too much to have "
                               "heard keepalives (no failure is declared in such a window)")

# ---- checkpointing protocol -------------------------------------------------------
EPOCHS = Counter("raftpoint_epochs_total", "Coordinated epochs by outcome (started, stable, aborted)", ["outcome"])
CHECKPOINTS = Counter("raftpoint_checkpoints_total", "Committed checkpoints by kind", ["kind"])
FORCED_CHECKPOINTS = Counter("raftpoint_forced_checkpoints_total",
                             "Checkpoints forced by the CIC protocol (the overhead CIC pays instead of coordination)")
USELESS_CHECKPOINTS = Counter("raftpoint_useless_checkpoints_total",
                              "Checkpoints found to lie on no consistent recovery line (wasted work)")
ROLLBACK_DEPTH = Histogram("raftpoint_rollback_intervals", "Intervals lost per agent rolled back",
                           buckets=(0, 1, 2, 5, 10, 20, 50, 100))
RECOVERIES = Counter("raftpoint_recoveries_total", "Recovery lines computed")
GC_BYTES = Counter("raftpoint_gc_bytes_total", "Checkpoint bytes made collectable")

# ---- agents (the leader's lease table and order streams) ------------------------------
LIVE_AGENTS = Gauge("raftpoint_live_agents", "Live agents the leader holds a lease for, by what keeps it: an open "
                    "session (lease=\"session\") or keepalive calls alone (lease=\"keepalive\"); 0 on followers",
                    ["lease"])
AGENTS_DECLARED_FAILED = Counter("raftpoint_agents_declared_failed_total", "Agents this node, leading, declared "
                                 "failed because their lease ran out")
ROLLBACK_DELIVERY_SECONDS = Histogram("raftpoint_rollback_delivery_seconds",
                                      "Time from a rollback order's commit on the leader to its push on the agent's "
                                      "order stream, for agents whose stream was open when it committed",
                                      buckets=(1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10))

for _role in ROLES:
    RAFT_ROLE.labels(_role)
for _kind in RAFT_EVENT_KINDS:
    RAFT_EVENTS.labels(_kind)
for _outcome in EPOCH_OUTCOMES:
    EPOCHS.labels(_outcome)
for _state in CONNECTION_STATES:
    GRPC_CONNECTIONS.labels(_state)
for _reason in CONNECTION_REFUSALS:
    GRPC_CONNECTIONS_REFUSED.labels(_reason)
for _work in ("read", "write", "keepalive"):
    SHED.labels(_work)
for _kind in CHECKPOINT_KINDS:
    CHECKPOINTS.labels(_kind)
for _lease in LEASE_KINDS:
    LIVE_AGENTS.labels(_lease)


def record_checkpoint(kind: str) -> None:
    """Count one committed checkpoint; forced ones also feed the dedicated counter,
    which is what alerting on CIC overhead watches."""
    CHECKPOINTS.labels(kind).inc()
    if kind == "forced":
        FORCED_CHECKPOINTS.inc()


class NodeFigures(Protocol):
    """What the gauges read of a replica's status (replication.replica.NodeStatus has it);
    a protocol, so metrics, a layer below replication, does not import it."""

    role: str
    term: int
    commit_index: int
    applied_index: int
    log_entries: int
    last_snapshot_age_s: float
    last_snapshot_bytes: int
    voters: int
    live_voters: int
    tick_lag_s: float


def update_node_gauges(status: NodeFigures) -> None:
    """Copy a replica's status into the gauges.

    Pulled (called periodically by the server) rather than pushed from the Raft
    thread, so metrics never add work to the replication path.
    """
    for role in ROLES:
        RAFT_ROLE.labels(role).set(1 if status.role == role else 0)
    RAFT_TERM.set(status.term)
    COMMIT_INDEX.set(status.commit_index)
    APPLIED_INDEX.set(status.applied_index)
    LOG_ENTRIES.set(status.log_entries)
    SNAPSHOT_AGE.set(status.last_snapshot_age_s)
    SNAPSHOT_BYTES.set(status.last_snapshot_bytes)
    RAFT_VOTERS.set(status.voters)
    RAFT_LIVE_VOTERS.set(status.live_voters)
    TICK_LAG.set(status.tick_lag_s)
