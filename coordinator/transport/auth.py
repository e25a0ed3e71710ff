"""Who is calling, and whether they may: the transport's half of authorization.

The identity comes from a bearer token (`authorization: Bearer <token>`, looked up
in the tokens file, which holds only SHA-256 hashes) or, failing that, from the
client certificate gRPC verified (its CN, else its first subject alternative name).
Token names and certificate names are two namespaces, whoever issues them: a token
acts as the principal `token:<name>`, a certificate as its name (`binding` says which
table of the bindings file applies to which). The decision itself is
`coordinator.core.authz`'s, against the bindings file. Both
files are re-read when they change, so a revoked or rotated token is refused
without a restart; a changed file that cannot be read or parsed leaves the last
good version in force and says so (WatchedFile).

Also here: agent secrets are replaced by their SHA-256 as soon as a request is
decoded (`seal_secrets`), so no handler, log entry or stored record holds one.
"""
from __future__ import annotations

import contextvars
import dataclasses
import enum
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Generic, Mapping, TypeVar

import grpc

from coordinator import fsutil
from coordinator.api.metadata import AUTHORIZATION_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import agent_secret, authz
from coordinator.core.authz import Grant, Role
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.observability import metrics

log = logging.getLogger("raftpoint.auth")

BEARER = "bearer "
# The services whose calls are authorized; health and reflection stay open (probes).
GUARDED_SERVICES = ("/raftpoint.v1.AgentService/", "/raftpoint.v1.AdminService/")
# The grant the current RPC was admitted with, for the proposer to put in the entry.
PRINCIPAL: contextvars.ContextVar[Grant | None] = contextvars.ContextVar("raftpoint_principal", default=None)
# The cluster's nodes, reading each other's status (the digest audit): observers.
NODE_IDENTITY = "raftpoint-node"
NODE_GRANT = Grant(NODE_IDENTITY, Role.OBSERVER)
_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,255}$")
_HEX_HASH = re.compile(r"^[0-9a-f]{64}$")
TOKEN_BYTES = 32  # 256 random bits

T = TypeVar("T")


class AuthConfigError(ValueError):
    """A tokens or bindings file that cannot be used; the message names the line."""


def token_hash(token: str) -> str:
    """What the tokens file holds for a token: SHA-256, hex. A token is 256 random
    bits, so a plain hash is enough (no salt or stretching needed against guessing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def node_token(raft_password: str) -> str:
    """The bearer token nodes present to each other: derived from the Raft password
    every member holds already, so peers need no token of their own to configure."""
    return hmac.new(raft_password.encode(), b"raftpoint node status", hashlib.sha256).hexdigest()


def parse_tokens(text: str, source: str = "tokens file") -> tuple[tuple[str, str], ...]:
    """`<identity> <sha256 hex>` per line; `#` starts a comment. An identity may have
    several lines (rotation: add the new token, move clients, delete the old line)."""
    entries: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not _IDENTITY.match(parts[0]) or not _HEX_HASH.match(parts[1]):
            raise AuthConfigError(f"{source} line {number}: expected '<identity> <sha256 hex of the token>'")
        entries.append((parts[0], parts[1]))
    return tuple(entries)


def add_token(path: Path, identity: str, *, keep_old: bool = False) -> str:
    """Write a new token's hash for `identity` into `path` (atomically, owner-only) and return the token."""
    text = path.read_text() if path.exists() else ""
    entries = [e for e in parse_tokens(text, str(path)) if keep_old or e[0] != identity]
    token = secrets.token_urlsafe(TOKEN_BYTES)
    entries.append((identity, token_hash(token)))
    parse_tokens(f"{identity} {token_hash(token)}\n", "identity")  # refuse a malformed identity
    body = "# <identity> <sha256 of its bearer token>\n" + "".join(f"{i} {h}\n" for i, h in entries)
    fsutil.atomic_write(path, body.encode())  # owner-only, like every temp file it renames
    return token


def add_binding(path: Path, identity: str, role: Role, group: str = "", pattern: str = "") -> None:
    """Append `identity`'s binding to a bindings file (refused if it would not parse).
    Every value is written as a TOML string (JSON's escapes are TOML's), so no name
    can close its string and add a table of its own."""
    table = f'\n[{_toml(identity)}]\nrole = {_toml(role.value)}\n'
    if group or pattern:
        table += f'group = {_toml(group)}\npattern = {_toml(pattern)}\n'
    text = (path.read_text() if path.exists() else "") + table
    parse_bindings(text, str(path))
    fsutil.atomic_write(path, text.encode())  # a node reading it meanwhile sees the old or the new file


def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def parse_bindings(text: str, source: str = "bindings file") -> dict[str, Grant]:
    """TOML, one table per identity: `role` (admin, agent, observer); the agent role
    also needs `group` and `pattern` (fnmatch, e.g. "worker-*"). A table is named
    `token:NAME`, `cert:NAME` or a bare `NAME` (see `binding`)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuthConfigError(f"{source}: {exc}") from None
    grants: dict[str, Grant] = {}
    for identity, table in doc.items():
        if not isinstance(table, dict) or not _IDENTITY.match(identity):
            raise AuthConfigError(f"{source}: [{identity}] must be a table named by an identity")
        if identity in {kind.prefix for kind in IdentityKind}:
            raise AuthConfigError(f"{source}: [{identity}] names no one: write [{identity}NAME]")
        unknown = set(table) - {"role", "group", "pattern"}
        if unknown:
            raise AuthConfigError(f"{source}: [{identity}] has unknown keys {sorted(unknown)}")
        try:
            role = Role(table.get("role"))
        except ValueError:
            raise AuthConfigError(f"{source}: [{identity}] role must be one of "
                                  f"{[r.value for r in Role]}, got {table.get('role')!r}") from None
        group, pattern = str(table.get("group", "")), str(table.get("pattern", ""))
        if role is Role.AGENT and not (group and pattern):
            raise AuthConfigError(f"{source}: [{identity}] the agent role needs a group and a pattern")
        if role is not Role.AGENT and (group or pattern):
            raise AuthConfigError(f"{source}: [{identity}] only the agent role takes a group and a pattern")
        grants[identity] = Grant(identity, role, group, pattern)
    return grants


class WatchedFile(Generic[T]):
    """A file parsed again whenever it changes (its mtime, size or inode), checked on
    every use: a stat is cheap next to an RPC, and a revocation (a line removed from a
    file that still parses) takes effect at once.

    A changed file that cannot be read or parsed keeps the last good parse in force,
    as the TLS reloader keeps the last good certificate: one typo in the file every
    node reads (one ConfigMap on Kubernetes) would otherwise refuse every agent's
    heartbeat, the leader would declare them all failed, and the admin who must fix
    it would be locked out too. The problem is logged once per change of the file and
    shown by raftpoint_auth_file_unusable until a good version is in place."""

    def __init__(self, path: str, parse: Callable[[str, str], T]) -> None:
        self.path, self.parse = path, parse
        self._key: tuple[int, int, int] | None = None  # the version last read, good or not
        self.problem = ""  # why the file as it is now is not in force ("" when it is)
        self._value: T = self._read(strict=True)

    def current(self) -> T:
        self._value = self._read(strict=False)
        return self._value

    def _read(self, strict: bool) -> T:
        key: tuple[int, int, int] | None = None  # None: the file could not even be stat'ed
        try:
            st = os.stat(self.path)
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key == self._key:
                return self._value
            value = self.parse(Path(self.path).read_text(), self.path)
        except (OSError, AuthConfigError) as exc:
            if strict:
                raise AuthConfigError(str(exc)) from None
            if (key, str(exc)) != (self._key, self.problem):  # once per version of the file and problem
                log.error("auth file %s is unusable; the last good version stays in force until it is "
                          "fixed: %s", self.path, exc)
            # A version that does not parse is not parsed again until it changes.
            self._key, self.problem = (key if isinstance(exc, AuthConfigError) else None), str(exc)
            metrics.AUTH_FILE_UNUSABLE.labels(self.path).set(1)
            return self.unusable(self._value)
        if self._key is not None or self.problem:
            log.info("auth file loaded: %s", self.path)
        self._key, self.problem = key, ""
        metrics.AUTH_FILE_UNUSABLE.labels(self.path).set(0)
        return value

    def unusable(self, last_good: T) -> T:
        """What is in force while the file cannot be read or parsed: its last good version.

        Chaos seam: `auth-fail-closed` (chaos/planted.py) replaces it with what an empty
        file grants."""
        return last_good


class IdentityKind(enum.Enum):
    """Where an identity's name comes from: the tokens file, or a client certificate."""

    TOKEN = "token"
    CERTIFICATE = "cert"

    @property
    def prefix(self) -> str:
        """How a bindings table names an identity of this kind only."""
        return f"{self.value}:"


@dataclass(frozen=True)
class Caller:
    """Who a call comes from: an identity and its kind, or None with the reason there is none."""

    identity: str | None
    why_not: str = ""
    kind: IdentityKind = IdentityKind.CERTIFICATE

    @property
    def principal(self) -> str | None:
        """The name grants carry (into log entries and the dedupe table): `token:<name>` for a
        token, the name itself for a certificate, as before tokens and certificates were apart.
        No certificate name begins with `token:` (Authorizer.caller refuses one), so
        the two never meet."""
        if self.identity is None or self.kind is IdentityKind.CERTIFICATE:
            return self.identity
        return IdentityKind.TOKEN.prefix + self.identity


def binding(caller: Caller, bindings: Mapping[str, Grant], token_names: Callable[[], Collection[str]]) -> Grant | None:
    """The bindings table that applies to `caller`, as its principal's grant; None if none does.

    `token:NAME` binds the bearer token NAME only and `cert:NAME` a certificate named NAME
    only. A bare `NAME` (the bindings files of earlier versions) binds the token NAME if
    the tokens file has one, else a certificate NAME: a certificate never takes a
    token's binding, whoever issued it. A name that itself begins with `token:` or `cert:`
    has no bare table (that table is another identity's). `token_names` is asked only
    for a certificate's bare table."""
    assert caller.identity is not None and caller.principal is not None
    grant = bindings.get(caller.kind.prefix + caller.identity)
    bare = not caller.identity.startswith(tuple(kind.prefix for kind in IdentityKind))
    if grant is None and bare and (caller.kind is IdentityKind.TOKEN or caller.identity not in token_names()):
        grant = bindings.get(caller.identity)
    return None if grant is None else dataclasses.replace(grant, identity=caller.principal)


class Authorizer:
    """Admits or refuses each guarded RPC before its handler runs."""

    def __init__(self, bindings_file: str, tokens_file: str = "", client_certs: bool = False,
                 node_token: str = "") -> None:
        self.bindings = WatchedFile(bindings_file, parse_bindings)
        self.tokens = WatchedFile(tokens_file, parse_tokens) if tokens_file else None
        self.client_certs = client_certs
        self._node_token_hash = token_hash(node_token) if node_token else ""

    def caller(self, context: grpc.aio.ServicerContext,
               tokens: tuple[tuple[str, str], ...] | None = None) -> Caller:
        """Who `context`'s call comes from; a bearer token is looked up in `tokens` (the
        tokens file as tokens_in_force returned it) or, when None, in the file as it is now."""
        presented = _bearer(context)
        if presented is not None:
            identity = self._token_identity(presented, tokens if tokens is not None else self.tokens_in_force())
            return Caller(identity, "" if identity else "unknown, revoked or rotated bearer token", IdentityKind.TOKEN)
        if self.client_certs:
            identity = certificate_identity(context.auth_context())
            if identity and identity.startswith(IdentityKind.TOKEN.prefix):
                return Caller(None, f"a certificate named {identity!r}: names beginning with "
                                    f"{IdentityKind.TOKEN.prefix!r} are kept for bearer tokens")
            if identity:
                return Caller(identity)
        return Caller(None)

    def _token_identity(self, presented: str, tokens: tuple[tuple[str, str], ...] | None) -> str | None:
        digest = token_hash(presented)
        found = None
        known = tokens or ()
        if self._node_token_hash:
            known = ((NODE_IDENTITY, self._node_token_hash), *known)
        for identity, stored in known:  # every line compared: no early exit to time
            if hmac.compare_digest(digest, stored):
                found = identity
        return found

    def tokens_in_force(self) -> tuple[tuple[str, str], ...] | None:
        """The parsed tokens file (re-read if it changed; None when there is none): the
        same object for as long as its content is, so a caller derived from it holds
        until this changes."""
        return self.tokens.current() if self.tokens is not None else None

    def admit(self, rpc: str, request: Any, context: grpc.aio.ServicerContext) -> Grant:
        """The caller's grant for this call; raises the Rejection that refuses it."""
        return self.grant(self.caller(context), rpc, request)

    def grant(self, caller: Caller, rpc: str, request: Any) -> Grant:
        """`caller`'s grant for `rpc` on `request`'s target, under the bindings in force
        now; raises the Rejection that refuses it."""
        if caller.identity is None and caller.why_not:
            raise Rejection.because(ReasonCode.UNAUTHENTICATED, caller.why_not)
        group, agent_id = request_target(request)
        grant: Grant | None = None
        if caller.identity == NODE_IDENTITY and caller.kind is IdentityKind.TOKEN:
            grant = NODE_GRANT
        elif caller.identity is not None:
            grant = binding(caller, self.bindings.current(), self._token_names)
        grants = {} if grant is None else {grant.identity: grant}
        principal = caller.principal if grant is None else grant.identity
        return authz.check(authz.decide(principal, grants, rpc, group, agent_id))

    def _token_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.tokens_in_force() or ())


def certificate_identity(auth_context: Mapping[str, Any]) -> str | None:
    """The verified peer certificate's CN, else its first subject alternative name."""
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth_context.get(key) or ()
        for value in values:
            text = value.decode() if isinstance(value, bytes) else str(value)
            if text:
                return text
    return None


def _bearer(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_METADATA_KEY:
            text = value.decode() if isinstance(value, bytes) else value
            return text[len(BEARER):].strip() if text.lower().startswith(BEARER) else ""
    return None


def request_target(request: Any) -> tuple[str, str]:
    """The group and agent id a request acts on ("" where it names none)."""
    if isinstance(request, pb.CommitCheckpointRequest):
        return request.checkpoint.group, request.checkpoint.agent_id
    if isinstance(request, pb.CreateGroupRequest):
        return request.spec.group, ""
    return getattr(request, "group", ""), getattr(request, "agent_id", "")


def seal_secrets(request: Any) -> None:
    """Replace an agent secret by its SHA-256 in place (and refuse a registration
    without one): what is proposed, compared and stored is only ever the hash."""
    if isinstance(request, pb.RegisterRequest):
        agent_secret.check(request.secret)
        request.secret = agent_secret.digest(request.secret)
    elif "token" in type(request).DESCRIPTOR.fields_by_name:
        request.token.secret = agent_secret.digest(request.token.secret)


def admit_into_context(authorizer: "Authorizer | None", rpc: str, request: Any,
                       context: grpc.aio.ServicerContext) -> None:
    """Admit one call (or one session frame) of `rpc`: its grant into PRINCIPAL, for
    the proposal the state machine re-checks, and its agent secret sealed. Raises the
    Rejection that refuses it. `authorizer` None: the open development mode."""
    _admitted(authorizer.admit(rpc, request, context) if authorizer else None, request)


def _admitted(grant: Grant | None, request: Any) -> None:
    """What every admitted call or frame carries on: its grant, for the proposal the
    state machine re-checks, and its agent secret sealed."""
    PRINCIPAL.set(grant)
    seal_secrets(request)


class SessionCaller:
    """Who a session's frames come from, derived when it opens and again only when the
    tokens file changed. A stream's bearer token and client certificate are fixed for its
    life, so hashing the token and reading the certificate per frame would only repeat
    the open's answer; both files are still checked at every frame (tokens_in_force and
    the bindings in Authorizer.grant), so a revocation refuses the session's next frame."""

    def __init__(self, authorizer: Authorizer, context: grpc.aio.ServicerContext) -> None:
        self._authorizer, self._context = authorizer, context
        self._caller: Caller | None = None
        self._derived_from: tuple[tuple[str, str], ...] | None = None

    def current(self) -> Caller:
        tokens = self._authorizer.tokens_in_force()
        if self._caller is None or tokens is not self._derived_from:
            # Derived from this very object: one read of the file names both the caller
            # and what it was derived from, so a change in between cannot be missed.
            self._caller, self._derived_from = self._authorizer.caller(self._context, tokens), tokens
        return self._caller

    def admit(self, rpc: str, request: Any) -> None:
        """As admit_into_context, for one frame of the session."""
        _admitted(self._authorizer.grant(self.current(), rpc, request), request)


def open_session(authorizer: "Authorizer | None", context: grpc.aio.ServicerContext) -> None:
    """A session stream opens only for a caller with an identity; each of its frames is
    then admitted like the unary call of the same operation (FRAME_CHECK)."""
    if authorizer is None:
        FRAME_CHECK.set(lambda rpc, request: admit_into_context(None, rpc, request, context))
        return
    session = SessionCaller(authorizer, context)
    caller = session.current()
    if caller.identity is None:
        raise Rejection.because(ReasonCode.UNAUTHENTICATED, caller.why_not or "no credentials")
    FRAME_CHECK.set(session.admit)


# Set for a session's handler by open_session: how each frame's operation is admitted.
# Unset (None) outside a session opened through the interceptor, e.g. in unit tests of
# AgentSession, where frames are only sealed.
FRAME_CHECK: contextvars.ContextVar[Callable[[str, Any], None] | None] = contextvars.ContextVar(
    "raftpoint_frame_check", default=None)


@dataclass(frozen=True)
class AuthSettings:
    """How a node authenticates, from its settings."""

    bindings_file: str = ""
    tokens_file: str = ""
    tls: bool = False
    client_certs: bool = False
    # What the cluster's own nodes present to each other (node_token).
    node_token: str = ""


INSECURE_WARNING = ("AUTHENTICATION IS OFF: this node runs without TLS and without an identity source, so "
                    "anyone who reaches its gRPC port can create, change and delete any group and act as any "
                    "agent. Configure auth_tokens_file (or client certificates) and auth_bindings_file.")
# A node without TLS can take bearer tokens (auth_tokens_file): fine on one host,
# dangerous across a network, so the node says so at start.
PLAINTEXT_SECRETS_WARNING = ("TOKENS AND SECRETS IN PLAINTEXT: this node runs without TLS (--insecure) but "
                             "authenticates callers by bearer token: every token and every agent's registration "
                             "secret crosses the network unencrypted, and anyone who can watch the traffic can "
                             "replay them to act as that caller. Use TLS unless every client is on this host.")


def authorizer_for(settings: AuthSettings) -> Authorizer | None:
    """The node's Authorizer; None for the insecure development mode (no TLS and no
    identity source), which the caller must announce loudly. Raises AuthConfigError
    for a configuration that would leave a TLS node open, or that is unusable."""
    identity_source = bool(settings.tokens_file) or settings.client_certs
    if not identity_source:
        if settings.tls:
            raise AuthConfigError("TLS is on but no identity source is configured: set a client CA (client "
                                  "certificates) or auth_tokens_file, and auth_bindings_file")
        if settings.bindings_file:
            raise AuthConfigError("auth_bindings_file is set but no identity source: set auth_tokens_file "
                                  "(or client certificates)")
        return None
    if not settings.bindings_file:
        raise AuthConfigError("an identity source is configured but no auth_bindings_file: nobody would "
                              "have a role")
    return Authorizer(settings.bindings_file, settings.tokens_file, settings.client_certs, settings.node_token)
