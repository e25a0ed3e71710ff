"""`raftpoint status`: each node's Raft and store state, from ClusterStatus."""
from __future__ import annotations

import argparse
import sys

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.api.metadata import bearer
from raftpoint.cli import security, target

PROG = "raftpoint status"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("status", help="show role, term and indexes of every node")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def _ask(endpoint: str, tls: ClientTLS, token: str | None) -> pb.NodeStatus | grpc.RpcError:
    try:
        with tls.channel(endpoint) as channel:
            return pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=2.0,
                                                                   metadata=bearer(token)).node
    except grpc.RpcError as err:
        return err


def run(args: argparse.Namespace) -> int:
    try:
        where = target.resolve(args)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    row = "{:<22} {:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>9}  {}"
    print(row.format("node (grpc)", "role", "term", "commit", "applied", "log", "snapshot", "snap age", "digest"))
    leaders = 0
    failed: list[tuple[str, grpc.RpcError]] = []
    for endpoint in where.endpoints:
        s = _ask(endpoint, where.tls, where.token)
        if isinstance(s, grpc.RpcError):
            print(row.format(endpoint, "DOWN", "-", "-", "-", "-", "-", "-", "-"))
            failed.append((endpoint, s))
            continue
        leaders += s.role == "leader"
        age = f"{s.last_snapshot_age_s:.0f}s" if s.last_snapshot_age_s >= 0 else "-"
        print(row.format(endpoint, s.role, s.term, s.commit_index, s.applied_index, s.log_entries,
                         s.last_snapshot_index, age, s.state_digest[:12]))
    if not leaders:
        for endpoint, err in failed:
            print(f"{PROG}: {security.explain(endpoint, err, where.tls, where.data_dir)}", file=sys.stderr)
        print("no leader", file=sys.stderr)
        return 1
    return 0
