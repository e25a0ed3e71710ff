"""The `raftpoint` console script: one subcommand per module in this package."""
from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

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
    "raftpoint.cli.gc",
    "raftpoint.cli.group",
    "raftpoint.cli.checkpoints",
    "raftpoint.cli.savepoint",
    "raftpoint.cli.retention",
    "raftpoint.cli.restore",
    "raftpoint.cli.whatif",
    "raftpoint.cli.repair",
    "raftpoint.cli.migrate",
    "raftpoint.cli.auth",
    "raftpoint.cli.clock",
    "raftpoint.cli.snapshot",
    "raftpoint.cli.completion",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftpoint", description="Checkpoint/recovery coordinator for multi-agent systems.")
    parser.add_argument("--version", action="version", version=f"raftpoint {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def version() -> str:
    """The installed distribution's version (built from coordinator/__init__.py, its one source)."""
    try:
        return metadata.version("raftpoint")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv  # for subcommands that re-execute themselves (chaos, in a mount namespace)
    args.parser = parser  # for `completion`, which describes the whole console
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # What an operator got wrong (a path that cannot be written, a port in use)
        # is said in one line; a traceback is for the bugs.
        print(f"raftpoint {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
