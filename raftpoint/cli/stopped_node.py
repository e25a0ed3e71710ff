"""The data dir of a stopped node, for the commands that change its files (repair, migrate)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, required=True, help="the stopped node's data dir")


def data_dir_of(args: argparse.Namespace, prog: str) -> Path | None:
    """The --data-dir given, or None once it has been refused on stderr (not a directory)."""
    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        print(f"{prog}: {data_dir} is not a directory", file=sys.stderr)
        return None
    return data_dir
