"""`raftpoint members add|remove NODE`: one Raft membership change, through the leader.

The leader refuses an add unless the node answers with the cluster's Raft password
and waits to join, and a remove that would leave fewer than 3 voters or no live
quorum unless --force is given."""
from __future__ import annotations

import argparse

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("members", help="add or remove one cluster member (one change at a time)")
    parser.add_argument("action", choices=("add", "remove"))
    parser.add_argument("node", help="the member's Raft address, host:port")
    parser.add_argument("--grpc", default="", help="add: the new node's gRPC address, where its health must say "
                        "it is waiting to join (default: its Raft host with the cluster's gRPC port)")
    parser.add_argument("--force", action="store_true", help="remove: even below 3 voters or below a live quorum")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    method = "AddNode" if args.action == "add" else "RemoveNode"
    _, code = target.admin_call(args, f"raftpoint members {args.action}", method,
                                pb.MembershipRequest(node=args.node, grpc=args.grpc, force=args.force))
    if code == 0:
        print(f"{args.action}ed {args.node}" if args.action == "add" else f"removed {args.node}")
    return code
