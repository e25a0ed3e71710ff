"""`raftpoint chaos`: fault-injection runs against a local cluster, checked afterwards.

  raftpoint chaos list
  raftpoint chaos run --scenario leader-kill-loop --duration 60 --seed 3
  raftpoint chaos run --scenario all --duration 600          # a soak: every scenario in turn

Exit status: 0 when every invariant held, 1 when one was violated (the report says
which, with the operations involved), 77 when the scenario cannot run on this
machine (disk faults need root and loop devices). Disk scenarios re-execute the
command inside a private mount namespace so that no mount outlives the run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from coordinator import channels
from raftpoint.cli import security

CANNOT_RUN = 77


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chaos", help="inject faults into a local cluster under load and check the history")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="the scenarios").set_defaults(func=_list)
    run = verbs.add_parser("run", help="run a scenario (or all of them) and check the history")
    run.add_argument("--scenario", required=True, help="a scenario name (see `raftpoint chaos list`) or 'all'")
    run.add_argument("--duration", type=float, default=30.0, help="seconds of load and faults per scenario")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    run.add_argument("--out", type=Path, default=Path("chaos-runs"), help="history, report and (kept) data")
    run.add_argument("--bug", help="plant a known bug in every node (chaos/planted.py); the checker must catch it")
    run.add_argument("--serve-bound", type=float, default=None,
                     help="seconds within which writes must succeed again after the last fault heals")
    run.add_argument("--flood-agents", type=int, default=None,
                     help="agents in the flood of scenarios that have one (default: the scenario's)")
    run.add_argument("--keep-data", action="store_true", help="keep node data dirs even when the run passed")
    run.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    run.set_defaults(func=_run)
    check = verbs.add_parser("check", help="load a running cluster (faults injected by others, e.g. Chaos Mesh) "
                                           "and check the history")
    check.add_argument("--endpoints", required=True,
                       help="comma-separated gRPC addresses of every node (each one's own, not a load balancer)")
    check.add_argument("--duration", type=float, default=300.0)
    check.add_argument("--seed", type=int, default=1)
    check.add_argument("--out", type=Path, default=Path("chaos-check"))
    check.add_argument("--json", action="store_true")
    security.add_flags(check)
    check.set_defaults(func=_check)


def _list(args: argparse.Namespace) -> int:
    from chaos.scenarios import SCENARIOS

    width = max(map(len, SCENARIOS))
    for name, scenario in SCENARIOS.items():
        print(f"{name.ljust(width)}  {scenario.description}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from chaos import planted, runner
    from chaos.disk import in_private_mount_namespace
    from chaos.scenarios import SCENARIOS

    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"raftpoint chaos: unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}, all", file=sys.stderr)
        return 2
    try:
        planted.require(args.bug or None)
    except ValueError as exc:
        print(f"raftpoint chaos: {exc}", file=sys.stderr)
        return 2
    if args.duration <= 0 or args.duration > 24 * 3600:
        print("raftpoint chaos: --duration must be in (0, 86400] seconds", file=sys.stderr)
        return 2
    if args.flood_agents is not None and not 0 <= args.flood_agents <= 100_000:
        print("raftpoint chaos: --flood-agents must be in [0, 100000]", file=sys.stderr)
        return 2
    needs_disks = any(SCENARIOS[n].needs_disks(args.seed, args.duration, args.nodes) for n in names)
    if needs_disks and not in_private_mount_namespace():
        return _reexec_in_mount_namespace(args.argv)
    worst = 0
    for name in names:
        config = runner.RunConfig(name, args.duration, args.seed, args.nodes, args.out / name, args.bug,
                                  keep_data=args.keep_data, flood_agents=args.flood_agents,
                                  **({"serve_bound_s": args.serve_bound} if args.serve_bound else {}))
        try:
            result = runner.run(config)
        except runner.CannotRun as exc:
            print(f"{name}: SKIPPED: {exc}")
            worst = max(worst, CANNOT_RUN if len(names) == 1 else 0)
            continue
        print(result.report.to_json() if args.json else result.report.table())
        for note in result.notes:
            print(f"NOTE: {note}")
        print(f"{name}: {'PASS' if result.ok else 'FAIL'} in {result.seconds:.1f}s; history {result.history}",
              flush=True)
        worst = max(worst, 0 if result.ok else 1)
    return worst


def _check(args: argparse.Namespace) -> int:
    from chaos import runner

    endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    if not endpoints or not 0 < args.duration <= 24 * 3600:
        print("raftpoint chaos check: give --endpoints and a --duration in (0, 86400]", file=sys.stderr)
        return 2
    try:
        tls = security.client_tls(args)
    except ValueError as exc:
        print(f"raftpoint chaos check: {exc}", file=sys.stderr)
        return 2
    with channels.environment(tls):
        report = runner.check_cluster(endpoints, args.duration, args.seed, args.out)
    print(report.to_json() if args.json else report.table())
    print(f"{'PASS' if report.ok else 'FAIL'}; history {args.out / runner.HISTORY_FILE}")
    return 0 if report.ok else 1


def _reexec_in_mount_namespace(argv: list[str]) -> int:
    """Run this same command again inside a private mount namespace (root only)."""
    from chaos.disk import private_mount_namespace_argv, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"SKIPPED: disk faults unavailable here: {reason}")
        return CANNOT_RUN
    return subprocess.run(private_mount_namespace_argv([sys.executable, "-m", "raftpoint.cli.main", *argv])).returncode
