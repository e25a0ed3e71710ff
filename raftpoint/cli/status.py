"""`raftpoint status`: each node's Raft and store state, from ClusterStatus."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS, ClientTLSError
from coordinator.harness.local_cluster import read_endpoints
from raftpoint.cli import security

PROG = "raftpoint status"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("status", help="show role, term and indexes of every node")
    parser.add_argument("--endpoints", help="comma-separated gRPC addresses (default: from --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path("raftpoint-data"))
    security.add_flags(parser)
    parser.set_defaults(func=run)


def _ask(endpoint: str, tls: ClientTLS) -> pb.NodeStatus | grpc.RpcError:
    try:
        with tls.channel(endpoint) as channel:
            return pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=2.0).node
    except grpc.RpcError as err:
        return err


def run(args: argparse.Namespace) -> int:
    if args.endpoints:
        endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    else:
        try:
            endpoints = read_endpoints(args.data_dir)
        except (OSError, ValueError) as exc:
            print(f"{PROG}: no --endpoints and {exc}", file=sys.stderr)
            return 2
    try:
        tls = security.client_tls(args)
        tls.options()
        if not tls.insecure:
            tls.credentials()  # a missing file is named now, not as N unreachable nodes
    except ClientTLSError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    row = "{:<22} {:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>9}  {}"
    print(row.format("node (grpc)", "role", "term", "commit", "applied", "log", "snapshot", "snap age", "digest"))
    leaders = 0
    errors: list[str] = []
    for endpoint in endpoints:
        s = _ask(endpoint, tls)
        if isinstance(s, grpc.RpcError):
            print(row.format(endpoint, "DOWN", "-", "-", "-", "-", "-", "-", "-"))
            errors.append(f"{endpoint}: {security.explain(s)}")
            continue
        leaders += s.role == "leader"
        age = f"{s.last_snapshot_age_s:.0f}s" if s.last_snapshot_age_s >= 0 else "-"
        print(row.format(endpoint, s.role, s.term, s.commit_index, s.applied_index, s.log_entries,
                         s.last_snapshot_index, age, s.state_digest[:12]))
    if not leaders:
        for error in errors:
            print(f"{PROG}: {error}", file=sys.stderr)
        print("no leader", file=sys.stderr)
        return 1
    return 0
