"""`raftpoint auth add-token <identity>`: make a bearer token for an identity.

Prints the token once and stores only its SHA-256 in the tokens file (the node's
auth_tokens_file, re-read when it changes, so no restart). By default the
identity's older tokens are dropped (rotation in one step); --keep-old adds the new
one beside them, to move clients over before removing the old line by hand.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.transport.auth import AuthConfigError, add_token


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("auth", help="manage bearer tokens")
    actions = parser.add_subparsers(dest="auth_command", required=True)
    add = actions.add_parser("add-token", help="make a token for an identity; print it once, store its hash")
    add.add_argument("identity")
    add.add_argument("--tokens-file", type=Path, required=True, help="the node's auth_tokens_file")
    add.add_argument("--keep-old", action="store_true", help="keep the identity's existing tokens valid")
    add.set_defaults(func=run_add_token)


def run_add_token(args: argparse.Namespace) -> int:
    try:
        token = add_token(args.tokens_file, args.identity, keep_old=args.keep_old)
    except (OSError, AuthConfigError) as exc:
        print(f"raftpoint auth add-token: {exc}", file=sys.stderr)
        return 1
    print(token)
    print(f"(shown once: only its hash is in {args.tokens_file})", file=sys.stderr)
    return 0
