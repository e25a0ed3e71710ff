"""`raftpoint clock reset`: put the replicated dedupe clock back to the cluster's time.

For after a node whose wall clock was far ahead led before its clock was held to
its voters' (a version without that bound): every request stamped with a client's
real time is then refused as too old to deduplicate (REASON_REQUEST_TOO_OLD). The
reset is one replicated command (core.dedupe.reset), through the leader."""
from __future__ import annotations

import argparse
import uuid

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target
from raftpoint.cli.output import utc


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("clock", help="the replicated clock that dedupes requests")
    parser.add_argument("action", choices=("reset",), help="reset: put it and its watermark at the leader's time "
                        "(held to its voters' clocks); requests issued before are refused as too old once their "
                        "answers are forgotten, so none is applied twice")
    target.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer, code = target.admin_call(args, f"raftpoint clock {args.action}", "ResetDedupeClock",
                                     pb.ResetDedupeClockRequest(request_id=f"clock-reset-{uuid.uuid4().hex}"))
    if code == 0:
        print(f"dedupe clock reset to {utc(answer.clock_s)} (was {utc(answer.previous_clock_s)})")
    return code
