"""The `raftpoint` console script: one subcommand per module in this package."""
from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines register(subparsers); the subcommand's handler is stored as
# the parser default `func` and returns the process exit code.
SUBCOMMAND_MODULES = (
    "raftpoint.cli.node",
    "raftpoint.cli.cluster",
    "raftpoint.cli.status",
    "raftpoint.cli.demo",
    "raftpoint.cli.simulate",
    "raftpoint.cli.members",
    "raftpoint.cli.chaos",
    "raftpoint.cli.repair",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftpoint", description="Checkpoint/recovery coordinator for multi-agent systems.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # for subcommands that re-execute themselves (chaos, in a mount namespace)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
