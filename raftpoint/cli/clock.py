"""`raftpoint clock reset`: put the replicated dedupe clock back to the cluster's time.

For after a node whose wall clock was far ahead led before its clock was held to
its voters' (a version without that bound): every request stamped with a client's
real time is then refused as too old to deduplicate (REASON_REQUEST_TOO_OLD). The
reset is one replicated command (core.dedupe.reset), through the leader."""
from __future__ import annotations

import argparse
import sys
import time
import uuid

from agent_client.connection import CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLSError
from raftpoint.cli import target


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("clock", help="the replicated clock that dedupes requests")
    parser.add_argument("action", choices=("reset",), help="reset: put it and its watermark at the leader's time "
                        "(held to its voters' clocks); requests issued before are refused as too old once their "
                        "answers are forgotten, so none is applied twice")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        where = target.resolve(args)
    except (OSError, ValueError) as exc:
        print(f"raftpoint clock {args.action}: {exc}", file=sys.stderr)
        return 2
    try:
        with where.connection(deadline=30, rpc_timeout=35) as conn:
            answer = conn.call("AdminService", "ResetDedupeClock",
                               pb.ResetDedupeClockRequest(request_id=f"clock-reset-{uuid.uuid4().hex}"))
    except (CoordinatorUnavailable, Rejected, ClientTLSError) as exc:
        print(f"raftpoint clock {args.action}: {exc}", file=sys.stderr)
        return 1
    print(f"dedupe clock reset to {_utc(answer.clock_s)} (was {_utc(answer.previous_clock_s)})")
    return 0


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds)) if seconds > 0 else "unset"
