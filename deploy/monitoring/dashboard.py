"""Writes dashboard.json beside it: the Grafana dashboard of a raftpoint cluster.

Generated rather than edited in Grafana so the layout stays regular and every query is
reviewable here. Run `python deploy/monitoring/dashboard.py` after a change;
tests/deploy/test_monitoring.py checks the JSON is this script's output and that every
query parses and names only metrics the nodes export.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("dashboard.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = 'namespace="$namespace"'
LEADS, WON = 'role="leader"', 'kind="election_won"'
WIDTH = 24  # Grafana's grid
HEIGHT = 8


def target(expr: str, legend: str) -> dict[str, Any]:
    return {"expr": expr, "legendFormat": legend, "datasource": DATASOURCE}


def sel(metric: str, matchers: str = "") -> str:
    """`metric` in the namespace the dashboard shows, with more label matchers if given."""
    return f"{metric}{{{', '.join(m for m in (SCOPE, matchers) if m)}}}"


def rate(metric: str) -> str:
    return f"rate({sel(metric)}[$__rate_interval])"


def per_pod(metric: str, legend: str = "{{pod}}") -> dict[str, Any]:
    return target(f"max by (pod) ({sel(metric)})", legend)


def last_5m(counter: str, legend: str) -> dict[str, Any]:
    return target(f"sum(increase({sel(counter)}[5m]))", legend)


def quantiles(metric: str, by: str = "") -> list[dict[str, Any]]:
    """p50 and p99 of a histogram, summed over the cluster or split by `by`."""
    group = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [target(f"histogram_quantile({q}, sum by ({group}) ({rate(metric + '_bucket')}))", f"{prefix}p{int(q * 100)}")
            for q in (0.5, 0.99)]


def panel(title: str, description: str, targets: list[dict[str, Any]], unit: str = "short",
          kind: str = "timeseries", mappings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, **({"mappings": mappings} if mappings else {})}
    return {"type": kind, "title": title, "description": description, "datasource": DATASOURCE,
            "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
            "gridPos": {"w": 8, "h": HEIGHT}}


LEADER_MAPPING = [{"type": "value", "options": {"0": {"text": "follower", "color": "transparent"},
                                                "1": {"text": "leader", "color": "green"}}}]

ROWS: list[tuple[str, list[dict[str, Any]]]] = [
    ("Leader and quorum", [
        panel("Leader", "Which pod leads (raftpoint_raft_role). A gap is an election; a minute without a leader "
              "raises RaftpointNoLeader.",
              [target(f"max by (pod) ({sel('raftpoint_raft_role', LEADS)})", "{{pod}}")],
              kind="state-timeline", mappings=LEADER_MAPPING),
        panel("Term and elections", "Raft term per pod, and elections won in the last 15 minutes (4 raise "
              "RaftpointFrequentLeaderChanges).",
              [per_pod("raftpoint_raft_term", "term {{pod}}"),
               target(f"sum(increase({sel('raftpoint_raft_events_total', WON)}[15m]))",
                      "elections won, 15 min")]),
        panel("Voters", "Voters in the configuration and those the leader reaches (itself included); at a bare "
              "quorum RaftpointQuorumAtRisk fires.",
              [target(f"max({sel('raftpoint_raft_voters')})", "voters"),
               target(f"max({sel('raftpoint_raft_live_voters')} and ignoring (role) "
                      f"{sel('raftpoint_raft_role', LEADS)} == 1)", "live voters (leader)")]),
    ]),
    ("Commits and the disk", [
        panel("Commit rate", "Log entries committed per second, per pod (the commit index's slope).",
              [target(f"deriv({sel('raftpoint_raft_commit_index')}[$__rate_interval])", "{{pod}}")], unit="ops"),
        panel("Commit latency", "From a command's proposal on the leader to its result: journaled by a majority, "
              "committed and applied (raftpoint_proposal_seconds).",
              quantiles("raftpoint_proposal_seconds"), unit="s"),
        panel("Journal fsync latency", "Per pod; every Raft message waits for it. p99 over 0.5 s for 10 minutes "
              "raises RaftpointSlowFsync.", quantiles("raftpoint_journal_fsync_seconds", "pod"), unit="s"),
    ]),
    ("Overload", [
        panel("Shed calls", "Calls refused with REASON_OVERLOADED before any work, by pod and kind of work (reads "
              "first, then writes, then keepalives).",
              [target(f"sum by (pod, work) ({rate('raftpoint_shed_total')})", "{{pod}} {{work}}")], unit="reqps"),
        panel("Event loop and Raft tick lag", "Worst lateness over the last second; past a few hundred ms the node "
              "sheds, near the election timeout followers depose the leader.",
              [per_pod("raftpoint_event_loop_lag_seconds", "loop {{pod}}"),
               per_pod("raftpoint_raft_tick_lag_seconds", "raft tick {{pod}}"),
               per_pod("raftpoint_gc_pause_seconds", "GC pause {{pod}}")], unit="s"),
        panel("Lease credit", "Seconds added to every agent lease because the leader lagged too much to hear "
              "keepalives (no agent is declared failed in such a window).",
              [target(f"sum({rate('raftpoint_lease_credit_seconds_total')})", "credit")], unit="s"),
    ]),
    ("Agents and recoveries", [
        panel("Agents by state", "Live agents the leader holds a lease for, by what keeps it (an open session, or "
              "keepalives alone), and agents declared failed in the last 5 minutes.",
              [target(f"sum by (lease) ({sel('raftpoint_live_agents')})", "live, {{lease}}"),
               last_5m("raftpoint_agents_declared_failed_total", "declared failed, 5 min")]),
        panel("Recoveries", "Recovery lines computed after a failure declared, and the intervals each rolled-back "
              "agent lost (p99).",
              [last_5m("raftpoint_recoveries_total", "recoveries, 5 min"),
               target(f"histogram_quantile(0.99, sum by (le) ({rate('raftpoint_rollback_intervals_bucket')}))",
                      "intervals lost p99")]),
        panel("Rollback delivery latency", "From a rollback order's commit on the leader to its push on the agent's "
              "open order stream.", quantiles("raftpoint_rollback_delivery_seconds"), unit="s"),
    ]),
    ("Integrity and certificates", [
        panel("Certificate expiry", "Days until the certificate each pod serves, and its client CA, expire "
              "(RaftpointCertificateExpiresSoon under 7).",
              [target(f"({sel('raftpoint_tls_certificate_expiry_timestamp_seconds')} - time()) / 86400",
                      "{{pod}} {{certificate}}")], unit="d"),
        panel("Diverged or unusable", "Peers found diverged by a node's digest audit, and files (TLS, auth) a node "
              "could not use and kept the last good version of: all 0 when healthy.",
              [per_pod("raftpoint_digest_diverged_peers", "diverged peers {{pod}}"),
               per_pod("raftpoint_tls_files_unusable", "TLS files unusable {{pod}}"),
               target(f"max by (pod, file) ({sel('raftpoint_auth_file_unusable')})", "{{file}} unusable {{pod}}")]),
        panel("Snapshot age", "Seconds since each pod's last snapshot (-1: none yet).",
              [per_pod("raftpoint_snapshot_age_seconds")], unit="s"),
    ]),
]


def dashboard() -> dict[str, Any]:
    """The dashboard: rows of panels laid out left to right, ids and refIds numbered."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, row in ROWS:
        panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"x": 0, "y": y, "w": WIDTH, "h": 1}})
        y += 1
        x = 0
        for p in row:
            if x + p["gridPos"]["w"] > WIDTH:
                x, y = 0, y + HEIGHT
            placed = {**p, "gridPos": {**p["gridPos"], "x": x, "y": y},
                      "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(p["targets"])]}
            panels.append(placed)
            x += p["gridPos"]["w"]
        y += HEIGHT
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "title": "raftpoint",
        "uid": "raftpoint",
        "description": "A raftpoint coordinator cluster: leader and quorum, commits and fsyncs, overload, agents "
                       "and recoveries, integrity and certificates.",
        "tags": ["raftpoint"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [
            {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
             "hide": 0},
            {"type": "query", "name": "namespace", "label": "Namespace", "datasource": DATASOURCE,
             "query": {"query": "label_values(raftpoint_raft_term, namespace)", "refId": "namespace"},
             "definition": "label_values(raftpoint_raft_term, namespace)", "refresh": 2, "sort": 1, "hide": 0},
        ]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
