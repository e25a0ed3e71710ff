"""`raftpoint simulate`: compare checkpointing protocols on a simulated group."""
from __future__ import annotations

import argparse
import sys

from coordinator.sim.engine import PROTOCOLS, TOPOLOGIES, simulate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="compare checkpointing protocols on a simulated group")
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--topology", choices=TOPOLOGIES, default="random")
    p.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--message-rate", type=float, default=0.3, help="probability an agent sends in a step")
    p.add_argument("--basic-interval", type=int, default=20, help="steps between basic checkpoints")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    protocols = PROTOCOLS if args.protocol == "all" else (args.protocol,)
    if args.agents > 256 or args.steps > 100_000:
        print("raftpoint simulate: at most 256 agents and 100000 steps", file=sys.stderr)
        return 2
    print(f"{args.agents} agents, {args.topology} topology, {args.steps} steps, message rate {args.message_rate}, "
          f"basic interval {args.basic_interval}, seed {args.seed}")
    print(f"{'protocol':<12} {'messages':>8} {'basic':>6} {'forced':>7} {'forced/basic':>12} {'useless':>8} "
          f"{'rollback/failure':>16}")
    for protocol in protocols:
        try:
            r = simulate(args.agents, args.topology, protocol, args.steps, args.message_rate, args.basic_interval,
                         args.seed)
        except ValueError as exc:
            print(f"raftpoint simulate: {exc}", file=sys.stderr)
            return 2
        print(f"{r.protocol:<12} {r.messages:>8} {r.basic:>6} {r.forced:>7} {r.forced_per_basic:>12.2f} "
              f"{r.useless:>8} {r.rollback:>16.2f}")
    return 0
