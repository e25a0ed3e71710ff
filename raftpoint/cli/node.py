"""`raftpoint coordinator`: run one coordinator node until SIGTERM/SIGINT."""
from __future__ import annotations

import argparse

from coordinator import config
from coordinator.main import run


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("coordinator", help="run one coordinator node")
    config.add_flags(parser)
    parser.set_defaults(func=run)
