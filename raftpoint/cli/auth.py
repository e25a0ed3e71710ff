"""`raftpoint auth add-token <identity>`: make a bearer token for an identity.

Prints the token once and stores only its SHA-256 in the tokens file (the node's
auth_tokens_file, re-read when it changes, so no restart). By default the
identity's older tokens are dropped (rotation in one step); --keep-old adds the new
one beside them, to move clients over before removing the old line by hand.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

from coordinator.transport.auth import AuthConfigError, parse_tokens, token_hash

TOKEN_BYTES = 32  # 256 random bits


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("auth", help="manage bearer tokens")
    actions = parser.add_subparsers(dest="auth_command", required=True)
    add = actions.add_parser("add-token", help="make a token for an identity; print it once, store its hash")
    add.add_argument("identity")
    add.add_argument("--tokens-file", type=Path, required=True, help="the node's auth_tokens_file")
    add.add_argument("--keep-old", action="store_true", help="keep the identity's existing tokens valid")
    add.set_defaults(func=run_add_token)


def add_token(path: Path, identity: str, *, keep_old: bool = False) -> str:
    """Write a new token's hash for `identity` into `path` (atomically, owner-only) and return the token."""
    text = path.read_text() if path.exists() else ""
    entries = [e for e in parse_tokens(text, str(path)) if keep_old or e[0] != identity]
    token = secrets.token_urlsafe(TOKEN_BYTES)
    entries.append((identity, token_hash(token)))
    parse_tokens(f"{identity} {token_hash(token)}\n", "identity")  # refuse a malformed identity
    body = "# <identity> <sha256 of its bearer token>\n" + "".join(f"{i} {h}\n" for i, h in entries)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return token


def run_add_token(args: argparse.Namespace) -> int:
    try:
        token = add_token(args.tokens_file, args.identity, keep_old=args.keep_old)
    except (OSError, AuthConfigError) as exc:
        print(f"raftpoint auth add-token: {exc}", file=sys.stderr)
        return 1
    print(token)
    print(f"(shown once: only its hash is in {args.tokens_file})", file=sys.stderr)
    return 0
