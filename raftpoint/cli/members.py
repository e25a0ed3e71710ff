"""`raftpoint members add|remove NODE`: one Raft membership change, through the leader."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLSError
from coordinator.harness.local_cluster import read_endpoints
from raftpoint.cli import security


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("members", help="add or remove one cluster member (one change at a time)")
    parser.add_argument("action", choices=("add", "remove"))
    parser.add_argument("node", help="the member's Raft address, host:port")
    parser.add_argument("--endpoints", help="comma-separated gRPC addresses (default: from --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path("raftpoint-data"))
    security.add_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        endpoints = ([e.strip() for e in args.endpoints.split(",") if e.strip()] if args.endpoints
                     else read_endpoints(args.data_dir))
    except (OSError, ValueError) as exc:
        print(f"raftpoint members {args.action}: no --endpoints and {exc}", file=sys.stderr)
        return 2
    try:
        tls = security.client_tls(args)
    except ClientTLSError as exc:
        print(f"raftpoint members {args.action}: {exc}", file=sys.stderr)
        return 2
    method = "AddNode" if args.action == "add" else "RemoveNode"
    try:
        with Connection(endpoints, deadline=30, rpc_timeout=35, tls=tls) as conn:
            conn.call("AdminService", method, pb.MembershipRequest(node=args.node))
    except (CoordinatorUnavailable, Rejected, ClientTLSError) as exc:
        print(f"raftpoint members {args.action}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.action}ed {args.node}" if args.action == "add" else f"removed {args.node}")
    return 0
