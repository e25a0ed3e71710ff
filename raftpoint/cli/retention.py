"""`raftpoint retention set|show G`: the checkpoints a group keeps beyond what recovery
needs and savepoints hold.

`set` replaces the whole policy (flags left out are 0: `--keep-last 0` alone clears
it); the coordinator checks the bounds and refuses a bad value with the field's
name. `raftpoint gc` applies the policy the next time it collects the group."""
from __future__ import annotations

import argparse
import re
import sys
import uuid

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target
from raftpoint.cli.output import add_json_flag, plain, print_json

PROG = "raftpoint retention"
# Duration suffixes --keep-every takes, in seconds; a bare number is seconds.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("retention", help="set or show a group's retention policy",
                            description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="retention_command", required=True)
    setting = actions.add_parser("set", help="replace the group's retention policy")
    setting.add_argument("group")
    setting.add_argument("--keep-last", type=int, default=0, metavar="N",
                         help="keep each agent's newest N stable checkpoints")
    setting.add_argument("--keep-every", default="0", metavar="DURATION",
                         help="keep each agent's newest stable checkpoint of every period this long "
                              "(90s, 30m, 1h, 1d, 1w; with --buckets)")
    setting.add_argument("--buckets", type=int, default=0, metavar="K",
                         help="for the last K periods of --keep-every, the current one included")
    setting.set_defaults(func=run_set)
    show = actions.add_parser("show", help="the group's retention policy")
    show.add_argument("group")
    show.set_defaults(func=run_show)
    for action in (setting, show):
        add_json_flag(action)
        target.add_arguments(action)


def seconds(duration: str) -> float:
    """A --keep-every value in seconds; ValueError naming the value when it is none."""
    match = _DURATION.fullmatch(duration.strip())
    if match is None:
        raise ValueError(f"--keep-every {duration!r}: expected a number with an optional unit "
                         f"({', '.join(UNITS)}), e.g. 1h")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def spoken(period_s: float) -> str:
    """Seconds in the largest unit that divides them: 3600 is "1h", 5400 "90m"."""
    for unit, size in sorted(UNITS.items(), key=lambda item: -item[1]):
        if period_s >= size and period_s % size == 0:
            return f"{period_s / size:g}{unit}"
    return f"{period_s:g}s"


def described(group: str, policy: pb.RetentionPolicy) -> str:
    kept = []
    if policy.keep_last:
        kept.append(f"the newest {policy.keep_last} stable checkpoints per agent")
    if policy.buckets:
        kept.append(f"per agent the newest stable checkpoint of each of the last {policy.buckets} periods of "
                    f"{spoken(policy.bucket_seconds)}")
    return (f"group {group} keeps, beyond what recovery needs and savepoints hold: "
            + ("; ".join(kept) if kept else "nothing"))


def _say(group: pb.Group, as_json: bool) -> None:
    if as_json:
        print_json({"group": group.spec.group, **plain(group.retention_policy)})
    else:
        print(described(group.spec.group, group.retention_policy))


def run_set(args: argparse.Namespace) -> int:
    prog = f"{PROG} set"
    try:
        period_s = seconds(args.keep_every)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        policy = pb.RetentionPolicy(keep_last=args.keep_last, bucket_seconds=period_s, buckets=args.buckets)
    except ValueError as exc:  # a count beyond 64 bits, which no request can carry
        print(f"{prog}: --keep-last {args.keep_last} or --buckets {args.buckets}: {exc}", file=sys.stderr)
        return 2
    answer, code = target.admin_call(args, prog, "SetRetention", pb.SetRetentionRequest(
        request_id=f"retention-{uuid.uuid4().hex}", group=args.group, policy=policy))
    if code == 0:
        _say(answer.group, args.json)
    return code


def run_show(args: argparse.Namespace) -> int:
    answer, code = target.admin_call(args, f"{PROG} show", "GetGroup", pb.GetGroupRequest(group=args.group,
                                                                                          page_size=1))
    if code == 0:
        _say(answer.group, args.json)
    return code
