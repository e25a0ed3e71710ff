"""Recovery-line scaling: the worklist propagation vs a naive repeat-until-no-orphan scan.

Random histories: A agents with C checkpoints each and M messages between random
intervals. Failure of one agent; both algorithms must return the same line (the
naive one is stopped after --naive-budget seconds and reported as a lower bound).
Run: python benchmarks/recovery_line.py [--agents 1000 --checkpoints 100 --messages 1000000]
"""
from __future__ import annotations

import argparse
import bisect
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.core import recovery_line as rl  # noqa: E402
from coordinator.core.history import Dependency, History  # noqa: E402


def make_history(agents: int, checkpoints: int, messages: int, seed: int, topology: str = "random") -> History:
    """Time-stepped and uncoordinated: each agent checkpoints at its own random times,
    messages go to random peers and arrive one step later, in send order."""
    rng = random.Random(seed)
    names = [f"a{i}" for i in range(agents)]
    steps = max(10, messages // max(1, agents // 10))
    times = {a: sorted(rng.sample(range(1, steps), checkpoints)) for a in names}
    cps = {a: tuple(range(checkpoints + 1)) for a in names}
    deps = []
    for i in range(messages):
        t = i * steps // messages
        if topology == "ring":  # long dependency chains: rollback travels agent to agent
            k = rng.randrange(agents)
            s, r = names[k], names[(k + 1) % agents]
        else:
            s, r = rng.sample(names, 2)
        send = bisect.bisect_right(times[s], t) + 1
        receive = bisect.bisect_right(times[r], t + 1) + 1
        deps.append(Dependency(s, send, r, receive, f"m{i}"))
    return History(cps, tuple(deps))


def naive(history: History, failed: set[str], budget: float) -> tuple[dict, int, bool]:
    cut = {a: (cps[-1] if a in failed else None) for a, cps in history.checkpoints.items()}
    end = time.perf_counter() + budget
    passes = 0
    while True:
        passes += 1
        changed = False
        for m in history.messages:
            rc, sc = cut[m.receiver], cut[m.sender]
            if (rc is None or m.receive_interval <= rc) and not (sc is None or m.send_interval <= sc):
                cut[m.receiver] = m.receive_interval - 1
                changed = True
        if not changed:
            return cut, passes, True
        if time.perf_counter() > end:
            return cut, passes, False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--checkpoints", type=int, default=100)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--naive-budget", type=float, default=60.0)
    p.add_argument("--topology", choices=("random", "ring"), default="random")
    args = p.parse_args()
    t = time.perf_counter()
    history = make_history(args.agents, args.checkpoints, args.messages, args.seed, args.topology)
    built = time.perf_counter() - t
    failed = {"a0"}
    t = time.perf_counter()
    line = rl.recovery_line(history, failed)
    fast = time.perf_counter() - t
    t = time.perf_counter()
    useless = rl.useless_checkpoints(history)
    scc = time.perf_counter() - t
    t = time.perf_counter()
    slow_cut, passes, finished = naive(history, failed, args.naive_budget)
    slow = time.perf_counter() - t
    print(f"{args.agents} agents x {args.checkpoints} checkpoints x {args.messages} messages, {args.topology} "
          f"(history built in {built:.1f}s)")
    print(f"{'algorithm':<34} {'seconds':>9}  result")
    print(f"{'worklist rollback propagation':<34} {fast:>9.2f}  {len(line.rolled_back)} agents roll back")
    print(f"{'useless checkpoints (SCC)':<34} {scc:>9.2f}  {len(useless)} useless")
    status = "same line" if finished and slow_cut == line.cut else (
        f"stopped after {passes} passes (lower bound)" if not finished else "DIFFERENT LINE")
    print(f"{'naive repeat-until-no-orphan scan':<34} {slow:>9.2f}  {passes} passes, {status}")
    print(f"speed-up: {slow / fast:.1f}x{' (at least)' if not finished else ''}")
    return 0 if (not finished or slow_cut == line.cut) else 1


if __name__ == "__main__":
    sys.exit(main())
