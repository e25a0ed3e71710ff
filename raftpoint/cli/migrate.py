"""`raftpoint migrate`: convert a stopped node's journal and snapshot of an older format.

A node refuses, at start, a journal or snapshot that carries no MAC (the journal of
CRC-checked records, pysyncobj's journal of raftpoint 0.1.0, a snapshot of version
1), naming this command: whoever could write such a file could have planted a
pickled callable in it. This rewrites them with the node's Raft password, once,
after checking that every journal entry is one a node writes (nothing in them is
run). Files already current are left alone, so running it again is harmless.
"""
from __future__ import annotations

import argparse
import sys

from coordinator import config
from coordinator.config import ConfigError
from coordinator.replication.journal_format import record_key
from coordinator.replication.migration import migrate
from coordinator.storage.dir_lock import DataDirLock
from coordinator.storage.protocol import EXIT_DAMAGED, DamagedAtRest
from raftpoint.cli import stopped_node

PROG = "raftpoint migrate"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "migrate", help="convert a stopped node's journal and snapshot of an older format (once, explicitly)",
        description="Rewrite a stopped node's Raft journal and snapshot of an older, unauthenticated format in the "
                    "current one, authenticated with the node's Raft password. A node refuses such files at start "
                    "and names this command. Already current files are left alone.")
    stopped_node.add_data_dir(parser)
    config.add_password_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data_dir = stopped_node.data_dir_of(args, PROG)
    if data_dir is None:
        return 2
    try:
        key = record_key(config.password_from_args(args))
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        with DataDirLock(data_dir):
            converted = migrate(data_dir, key)
    except DamagedAtRest as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_DAMAGED
    except (OSError, ValueError) as exc:  # the data dir in use; a file of another password or unreadable
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    if not converted:
        print(f"{PROG}: nothing to convert in {data_dir}: no journal or snapshot of an older format")
        return 0
    for line in converted:
        print(f"converted {line}")
    print("start the node again with the same flags")
    return 0
