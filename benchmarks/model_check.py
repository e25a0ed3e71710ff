"""The recovery protocol model-checked over the real core, every mode, one table.

Breadth-first over every interleaving of agents' sends, receives, checkpoints,
crashes and restarts, duplicated messages, lost requests and answers, re-deliveries
after a rollback, lease expiries, rollback orders and
acknowledgements, and leader changes (tests/modelcheck/). "complete" says the depth
bound cut nothing off: every reachable state within the other bounds was checked.
One world is explored per orbit of agent renamings (tests/modelcheck/symmetry.py)
unless --no-symmetry, and none that only has less budget left than one already
queued (tests/modelcheck/subsumption.py) unless --no-subsumption; both keep every
verdict and the length of every shortest counterexample. --levels prints how many
states each depth adds: the growth that says how far a run that stopped at
--max-seconds was from complete. The full size: --agents 3 --failures 2
--leader-changes 1 --losses 1 (docs/chaos.md, "The model checker", has the figures). A long run
keeps about 20 bytes a state seen in memory and, past --in-memory worlds, a
depth's worlds on disk (about a hundred bytes each, in the temporary directory); --jobs N
explores N modes at once, one process each, and --workers N expands each depth of a mode
on N processes (tests/modelcheck/workers.py: the same states, levels and traces as one,
1.3 to 1.5 times as fast on two cores, with about twice the memory). With --save-dir DIR a search saves itself
as each depth starts and every --save-every seconds while it expands one and, stopped at
any point and run again with the same arguments, resumes from the last save
(tests/modelcheck/saved_search.py): the full size takes CPU-hours per mode, and its
largest depths hours each.
Run: python benchmarks/model_check.py [--agents 2 --depth 40 --failures 1 --leader-changes 1 --max-seconds 600 --jobs 2]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.core.model import Mode  # noqa: E402
from tests.modelcheck.explore import IN_MEMORY, PROGRESS_EVERY, SAVE_EVERY, Report, check  # noqa: E402
from tests.modelcheck.saved_search import SaveRefused  # noqa: E402
from tests.modelcheck.world import Bounds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="*", default=[m.value for m in Mode], choices=[m.value for m in Mode])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--depth", type=int, default=40)
    parser.add_argument("--failures", type=int, default=1, help="crashes plus lease expiries of live agents")
    parser.add_argument("--leader-changes", type=int, default=1)
    parser.add_argument("--sends", type=int, default=1, help="messages each agent sends")
    parser.add_argument("--max-index", type=int, default=1, help="highest checkpoint index an agent takes")
    parser.add_argument("--losses", type=int, default=1, help="messages duplicated, requests and answers lost")
    parser.add_argument("--epochs", type=int, default=1, help="coordinated: epochs the leader starts")
    parser.add_argument("--max-seconds", type=float, default=None, help="per mode; the row then says incomplete")
    parser.add_argument("--no-symmetry", action="store_true", help="explore every renaming of a world too")
    parser.add_argument("--no-subsumption", action="store_true",
                        help="explore a world even if one with at least its budgets was explored")
    parser.add_argument("--levels", action="store_true", help="print the states queued at each depth")
    parser.add_argument("--progress", action="store_true",
                        help="print a line as each level is done (states, seconds, memory), and every "
                             "--progress-every seconds while one is expanded: for long runs")
    parser.add_argument("--progress-every", type=float, default=PROGRESS_EVERY,
                        help="seconds between two --progress lines while a level is expanded")
    parser.add_argument("--in-memory", type=int, default=IN_MEMORY,
                        help="worlds of one depth held in memory (about 1.5 KB each); the rest go to a temporary file")
    parser.add_argument("--jobs", type=int, default=1, help="modes explored at once, one process each")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes that expand each depth of a mode (a depth is then saved as it starts, "
                             "not partway)")
    parser.add_argument("--save-dir", type=Path, default=None,
                        help="a directory each mode's search saves itself to as each depth starts (a subdirectory "
                             "per mode) and, run again with the same arguments, resumes from")
    parser.add_argument("--save-every", type=float, default=SAVE_EVERY,
                        help="seconds between two saves while a depth is expanded (a stop loses at most that much)")
    args = parser.parse_args()
    for name in ("jobs", "workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, not {getattr(args, name)}")
    if len(set(args.modes)) < len(args.modes):
        parser.error("a mode is named twice in --modes")
    for name in ("save_every", "progress_every"):
        if not getattr(args, name) >= 0:  # NaN too
            parser.error(f"--{name.replace('_', '-')} must be 0 or more seconds, not {getattr(args, name)}")
    if args.save_dir is not None and "PYTHONHASHSEED" not in os.environ:
        # A saved search's keys are hashes of strings: every run that resumes it must hash alike.
        os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": "0"})
    print(f"agents={args.agents} failures={args.failures} leader_changes={args.leader_changes} sends={args.sends} "
          f"max_index={args.max_index} losses={args.losses} epochs={args.epochs} depth<={args.depth} "
          f"symmetry={'off' if args.no_symmetry else 'on'} subsumption={'off' if args.no_subsumption else 'on'}")
    print(f"{'mode':<14} {'states':>9} {'transitions':>12} {'depth':>6} {'recoveries':>11} {'seconds':>8} "
          f"{'complete':>9}  violations")
    explore = partial(_explore, args)
    with multiprocessing.Pool(args.jobs) if args.jobs > 1 else _Serial() as pool:
        try:
            done = list(_rows(pool.imap_unordered(explore, args.modes), args.levels))
        except SaveRefused as e:
            print(f"model_check: {e}", file=sys.stderr)
            return 2
    found = [f"[{name}] {v}" for name, report in done for v in report.violations.values()]
    for violation in found:
        print(f"\n{violation}")
    return 1 if found else 0


def _rows(reports: Iterator[tuple[str, Report]], levels: bool) -> Iterator[tuple[str, Report]]:
    """A row printed as each mode is done."""
    for name, report in reports:
        print(f"{name:<14} {report.states:>9} {report.transitions:>12} {report.depth_reached:>6} "
              f"{report.recoveries:>11} {report.seconds:>8.1f} {'yes' if report.complete else 'no':>9}  "
              f"{', '.join(report.violations) or 'none'}", flush=True)
        if levels:
            print(f"{'':<14} states per depth: {report.per_level}", flush=True)
        yield name, report


class _Serial:
    """A pool of one: the modes explored one after the other, in this process."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def imap_unordered(self, f: Callable[[str], tuple[str, Report]], modes: list[str]) -> Iterator[tuple[str, Report]]:
        return map(f, modes)


def _explore(args: argparse.Namespace, name: str) -> tuple[str, Report]:
    bounds = Bounds(Mode(name), agents=args.agents, failures=args.failures, leader_changes=args.leader_changes,
                    sends=args.sends, max_index=args.max_index, losses=args.losses, epochs=args.epochs)
    return name, check(bounds, args.depth, max_seconds=args.max_seconds, symmetric=not args.no_symmetry,
                       subsume=not args.no_subsumption, progress=_progress(name) if args.progress else None,
                       progress_every=args.progress_every,
                       in_memory=args.in_memory, save_dir=None if args.save_dir is None else args.save_dir / name,
                       save_every=args.save_every, workers=args.workers)


def _progress(mode: str) -> Callable[[Report, int], None]:
    def show(report: Report, expanded: int) -> None:
        # depth_reached is the depth of the last world expanded: the one before a level
        # just started, the level itself partway through it.
        at = report.depth_reached
        queued = report.per_level[at + 1] if len(report.per_level) > at + 1 else 0
        where, so_far = ((f"depth {at} done", "") if not expanded else
                         (f"depth {at}: {expanded:,} of its {report.per_level[at]:,} worlds expanded", " so far"))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(f"  {mode}: {where}, {report.states + 1:,} states, {queued:,} queued at depth {at + 1}{so_far}, "
              f"{report.seconds:.0f} s, peak memory {peak:,.0f} MiB", flush=True)
    return show


if __name__ == "__main__":
    sys.exit(main())
