"""Which cluster a command talks to, with which bearer token and which TLS settings:
one set of flags for every subcommand that calls a running cluster.

The token is read from --token-file (or RAFTPOINT_TOKEN_FILE); without one, a
cluster that `raftpoint cluster up` started in --data-dir lends its admin token.
The TLS settings are raftpoint.cli.security's.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from agent_client.connection import TOKEN_FILE_ENV, Connection, CoordinatorUnavailable, Rejected, read_token_file
from agent_client.pages import every_page  # noqa: F401  (the subcommands' name for it)
from coordinator.channels import ClientTLS, ClientTLSError
from coordinator.endpoints_file import DEFAULT_DATA_DIR, read_endpoints
from coordinator.harness.local_cluster import admin_token
from raftpoint.cli import security

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoints", help="comma-separated gRPC addresses (default: from --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR))
    parser.add_argument("--token-file", default=None,
                        help=f"file whose first line is the bearer token to present (default: ${TOKEN_FILE_ENV}; "
                             "else the admin token of the cluster in --data-dir, if it has one)")
    security.add_flags(parser)


@dataclass(frozen=True)
class Target:
    endpoints: list[str]
    token: str | None
    tls: ClientTLS
    data_dir: Path  # whose endpoints.json can name a Raft or metrics port given as --endpoints

    def connection(self, **options: Any) -> Connection:
        """A Connection to this cluster (options: deadline, rpc_timeout)."""
        return Connection(self.endpoints, token=self.token, tls=self.tls, cluster_dirs=(self.data_dir,), **options)


def resolve(args: argparse.Namespace) -> Target:
    """Raises OSError or ValueError (with the reason) when there is no cluster to talk
    to, or the TLS files named cannot be used (named now, not as N unreachable nodes)."""
    if args.endpoints:
        endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    else:
        endpoints = read_endpoints(args.data_dir)
    tls = security.client_tls(args)
    tls.options()
    if not tls.insecure:
        tls.credentials()
    token_file = args.token_file or os.environ.get(TOKEN_FILE_ENV)
    if token_file:
        return Target(endpoints, read_token_file(token_file), tls, args.data_dir)
    return Target(endpoints, None if args.endpoints else admin_token(args.data_dir), tls, args.data_dir)


def admin_call(args: argparse.Namespace, prog: str, method: str, request: Any) -> tuple[Any, int]:
    """(the answer, 0) to one AdminService call through the cluster's leader, or (None,
    the exit code) once the reason is said in one line: 2 for settings that name no
    usable cluster, 1 for a refusal or a cluster that did not answer."""
    return admin_calls(args, prog, lambda conn: conn.call("AdminService", method, request))


def admin_calls(args: argparse.Namespace, prog: str, ask: Callable[[Connection], T]) -> tuple[T | None, int]:
    """What `ask` makes of its AdminService calls on one connection to the cluster, and
    0; or None and the exit code, as admin_call says."""
    try:
        where = resolve(args)
    except (OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None, 2
    try:
        with where.connection(deadline=30, rpc_timeout=35) as conn:
            return ask(conn), 0
    except (CoordinatorUnavailable, Rejected, ClientTLSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None, 1
