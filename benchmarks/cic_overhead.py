"""Per-message cost of the CIC rules (send + receive side) at 64 agents.

Run: python benchmarks/cic_overhead.py [--agents 64 --messages 200000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.core import cic  # noqa: E402


def bcs(messages: int) -> float:
    sender, receiver = cic.BcsState(lc=5), cic.BcsState(lc=7)
    t = time.perf_counter()
    for _ in range(messages):
        piggyback = cic.bcs_on_send(sender)
        if cic.bcs_forced_index(receiver, piggyback) is not None:
            cic.bcs_on_checkpoint(receiver, cic.bcs_decode(piggyback))
    return (time.perf_counter() - t) / messages


def fdas(agents: int, messages: int) -> float:
    sender, receiver = cic.FdasState.create(0, agents), cic.FdasState.create(1, agents)
    t = time.perf_counter()
    for _ in range(messages):
        piggyback = cic.fdas_on_send(sender)
        if cic.fdas_must_checkpoint(receiver, piggyback):
            cic.fdas_on_checkpoint(receiver)
        cic.fdas_on_deliver(receiver, piggyback)
    return (time.perf_counter() - t) / messages


def hmnr(agents: int, messages: int) -> float:
    sender, receiver = cic.HmnrState.create(0, agents), cic.HmnrState.create(1, agents)
    t = time.perf_counter()
    for _ in range(messages):
        piggyback = cic.hmnr_on_send(sender, 1)
        if cic.hmnr_must_checkpoint(receiver, 0, piggyback):
            cic.hmnr_on_checkpoint(receiver)
        cic.hmnr_on_deliver(receiver, 0, piggyback)
    return (time.perf_counter() - t) / messages


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--agents", type=int, default=64)
    p.add_argument("--messages", type=int, default=200_000)
    args = p.parse_args()
    print(f"{'protocol':<8} {'agents':>6} {'piggyback bytes':>15} {'us per message (send+receive)':>30}")
    print(f"{'bcs':<8} {args.agents:>6} {8:>15} {bcs(args.messages) * 1e6:>30.2f}")
    print(f"{'hmnr':<8} {args.agents:>6} {17 * args.agents:>15} {hmnr(args.agents, args.messages) * 1e6:>30.2f}")
    print(f"{'fdas':<8} {args.agents:>6} {8 * args.agents:>15} {fdas(args.agents, args.messages) * 1e6:>30.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
