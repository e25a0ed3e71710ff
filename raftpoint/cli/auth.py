"""`raftpoint auth`: who may call a cluster.

`add-token <identity>` makes a bearer token: it prints the token once and stores only
its SHA-256 in the tokens file (the node's auth_tokens_file, re-read when it
changes, so no restart). By default the identity's older tokens are dropped
(rotation in one step); --keep-old adds the new one beside them, to move clients over
before removing the old line by hand.

`add-binding <identity> --role R` gives an identity a role in the bindings file (the
node's auth_bindings_file, re-read the same way): `token:NAME` for a bearer token,
`cert:NAME` for a client certificate.

`add-agent <identity> --group G` does both halves of a least-privilege agent for a
cluster `raftpoint cluster up` runs, whose nodes require a client certificate from
its CA: a certificate for the identity from that CA (<data-dir>/tls), and a binding
of `cert:<identity>` to the agent role in group G only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.core.authz import Grant, Role
from coordinator.endpoints_file import DEFAULT_DATA_DIR
from coordinator.harness.certs import CA_CERT, LocalCA
from coordinator.harness.local_cluster import ADMIN, AUTH_DIR, BINDINGS_FILE, TLS_DIR
from coordinator.transport.auth import AuthConfigError, IdentityKind, add_binding, add_token, parse_bindings

PROG = "raftpoint auth"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("auth", help="manage bearer tokens, bindings and agent identities")
    actions = parser.add_subparsers(dest="auth_command", required=True)
    add = actions.add_parser("add-token", help="make a token for an identity; print it once, store its hash")
    add.add_argument("identity")
    add.add_argument("--tokens-file", type=Path, required=True, help="the node's auth_tokens_file")
    add.add_argument("--keep-old", action="store_true", help="keep the identity's existing tokens valid")
    add.set_defaults(func=run_add_token)
    bind = actions.add_parser("add-binding", help="give an identity a role in the bindings file")
    bind.add_argument("identity", help="token:NAME (a bearer token), cert:NAME (a client certificate's name)")
    bind.add_argument("--role", required=True, choices=[r.value for r in Role])
    _agent_scope(bind)
    bind.add_argument("--bindings-file", type=Path, required=True, help="the node's auth_bindings_file")
    bind.set_defaults(func=run_add_binding)
    agent = actions.add_parser("add-agent", help="`raftpoint cluster up`'s cluster: a client certificate for an "
                                                 "agent identity, bound to one group")
    agent.add_argument("identity", help="the certificate's name (its common name)")
    _agent_scope(agent, group_required=True)
    agent.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR), help="the cluster's data dir")
    agent.set_defaults(func=run_add_agent)


def _agent_scope(parser: argparse.ArgumentParser, group_required: bool = False) -> None:
    parser.add_argument("--group", required=group_required, default="", help="agent role: the one group it may use")
    parser.add_argument("--pattern", default="*", help="agent role: the agent ids it may act as "
                                                       "(fnmatch, e.g. 'worker-*'; default every one)")


def run_add_token(args: argparse.Namespace) -> int:
    try:
        token = add_token(args.tokens_file, args.identity, keep_old=args.keep_old)
    except (OSError, AuthConfigError) as exc:
        print(f"{PROG} add-token: {exc}", file=sys.stderr)
        return 1
    print(token)
    print(f"(shown once: only its hash is in {args.tokens_file})", file=sys.stderr)
    return 0


def run_add_binding(args: argparse.Namespace) -> int:
    role = Role(args.role)
    grant = Grant(args.identity, role, args.group, args.pattern if role is Role.AGENT else "")
    try:
        _bind(args.bindings_file, grant)
    except (OSError, AuthConfigError) as exc:
        print(f"{PROG} add-binding: {exc}", file=sys.stderr)
        return 1
    print(f"{_described(grant)} (in {args.bindings_file}; nodes re-read it)")
    return 0


def run_add_agent(args: argparse.Namespace) -> int:
    prog = f"{PROG} add-agent"
    tls_dir, bindings = args.data_dir / TLS_DIR, args.data_dir / AUTH_DIR / BINDINGS_FILE
    if not (tls_dir / CA_CERT).exists() or not bindings.exists():
        print(f"{prog}: {args.data_dir} holds no cluster of `raftpoint cluster up` (no {tls_dir / CA_CERT} or "
              f"{bindings}): start one there first", file=sys.stderr)
        return 2
    if args.identity == ADMIN or args.identity.startswith(tuple(kind.prefix for kind in IdentityKind)):
        print(f"{prog}: {args.identity!r} cannot name an agent (the cluster's admin certificate is {ADMIN!r}; "
              "a certificate's name has no token: or cert: prefix)", file=sys.stderr)
        return 2
    grant = Grant(IdentityKind.CERTIFICATE.prefix + args.identity, Role.AGENT, args.group, args.pattern)
    try:
        _bind(bindings, grant, also_bare=args.identity)
        tls = LocalCA.load(tls_dir).client_tls(args.identity)  # the identity's certificate, made if it has none
    except (OSError, ValueError) as exc:  # AuthConfigError is a ValueError
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    print(f"{_described(grant)} (in {bindings}; nodes re-read it). Its client settings:")
    print(f"  ca_file   {tls.ca_file}\n  cert_file {tls.cert_file}\n  key_file  {tls.key_file}")
    return 0


def _bind(path: Path, grant: Grant, also_bare: str = "") -> None:
    """Add `grant` unless the file has it already; AuthConfigError when the identity
    (or the bare name `also_bare`, which a certificate binding would take over) is
    bound otherwise: a binding is changed by hand, not by adding one."""
    current = parse_bindings(path.read_text(), str(path)) if path.exists() else {}
    for name in filter(None, (grant.identity, also_bare)):
        if name in current and current[name] != (grant if name == grant.identity else None):
            raise AuthConfigError(f"{path}: [{name}] is bound already ({_described(current[name])}); "
                                  "edit the file to change it")
    if grant.identity not in current:
        add_binding(path, grant.identity, grant.role, grant.group, grant.pattern)


def _described(grant: Grant) -> str:
    scope = f" for agents {grant.pattern!r} of group {grant.group!r}" if grant.role is Role.AGENT else ""
    return f"{grant.identity}: role {grant.role.value}{scope}"
