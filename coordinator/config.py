"""One configuration object for a coordinator node.

Sources, lowest priority first: defaults, a TOML file (--config or
RAFTPOINT_CONFIG), environment variables RAFTPOINT_<FIELD>, command-line flags.
On Kubernetes the node's identity and peers are derived from the StatefulSet's
stable names (`<set>-<ordinal>.<headless service>`), so every pod renders the same
configuration and only its hostname differs.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import socket
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping

from coordinator.channels import CLIENT_ENV
from coordinator.tracing import TRACE_FILE_ENV
from coordinator.core import ids
from coordinator.core.errors import Rejection

ENV_PREFIX = "RAFTPOINT_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
# RAFTPOINT_* variables read by the other programs of the project (the agent
# library's blob encryption key, the demo agents' planted faults), which may share
# the node's environment; every other RAFTPOINT_* variable must name a setting.
FOREIGN_ENV_PREFIXES = (ENV_PREFIX + "AEAD_", ENV_PREFIX + "DEMO_", ENV_PREFIX + "TOKEN_FILE")


CLIENT_AUTH_MODES = ("none", "require")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names it."""


@dataclass(frozen=True)
class Peer:
    """A cluster member: its Raft address is its identity; gRPC is where clients go."""

    raft: str
    grpc: str

    @classmethod
    def parse(cls, spec: str, default_grpc_port: int) -> "Peer":
        raft, _, grpc = spec.strip().partition("=")
        _check_address(raft, "peer raft address")
        if not grpc:
            grpc = f"{raft.rsplit(':', 1)[0]}:{default_grpc_port}"
        _check_address(grpc, "peer gRPC address")
        return cls(raft, grpc)

    def __str__(self) -> str:
        return f"{self.raft}={self.grpc}"


def _check_address(address: str, what: str) -> None:
    try:
        ids.check_address(address, what)
    except Rejection as r:
        raise ConfigError(f"{what} {r.reason}") from None


def setting(default: Any, help: str) -> Any:  # noqa: A002 (argparse's name)
    """A NodeConfig field with the line `raftpoint coordinator --help` prints for it."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class NodeConfig:
    """A node's settings: each can be a flag (--auto-tick-period), an environment
    variable (RAFTPOINT_AUTO_TICK_PERIOD) or a TOML key (auto_tick_period); its help
    says what it is for."""

    raft_address: str = setting("127.0.0.1:7000", "this node's Raft address, host:port (its peers dial it)")
    grpc_address: str = setting("127.0.0.1:50051", "the gRPC address clients and peers call, host:port")
    metrics_address: str = setting("127.0.0.1:9100", "where /metrics (and /livez, /readyz) are served, host:port")
    probe_address: str = setting(
        "", "plain HTTP serving GET /livez and /readyz only, host:port ('': none; the metrics port serves them "
            "too), for a kubelet, which shows no client certificate to a metrics port that requires one")
    peers: tuple[str, ...] = setting((), "the other members, comma-separated raft_host:port[=grpc_host:port]")
    data_dir: str = setting("./raftpoint-data", "the node's journal, snapshot and store")
    # The Raft password: from raft_password_file, RAFTPOINT_RAFT_PASSWORD or the TOML
    # file, never a flag (a command line is visible to every user in `ps`).
    raft_password: str = setting("", "the Raft password (never a flag: RAFTPOINT_RAFT_PASSWORD or the TOML file)")
    raft_password_file: str = setting("", "a file holding the Raft password")
    raft_auth_timeout_s: float = setting(
        5.0, "seconds a Raft connection has to authenticate (and name its node) before it is closed")
    raft_unauthenticated_max_bytes: int = setting(
        65536, "the largest message a Raft connection may announce before it has authenticated")
    raft_unauthenticated_per_source: int = setting(
        16, "Raft connections one address may hold that have not authenticated")
    store: str = setting("lmdb", "the state store: lmdb (memory: tests only)")
    map_size_mb: int = setting(1024, "LMDB's initial map size (grown as needed up to max_map_size_mb)")
    max_map_size_mb: int = setting(65536, "LMDB's largest map size: past it writes are refused as the store full")
    # etcd's election timeout (1 s) and a leader fallback above its widest draw: a
    # leader saturated by thousands of agents' keepalives runs its Raft ticks late,
    # and with 0.4-1 s it lost the lead 44 times in one run at 5,000 agents, and agents
    # that were alive were declared failed (1,309); with these, neither happened
    # (benchmarks/agents_scale.py). raft_min_timeout and raft_max_timeout below go with
    # it. Failover costs about a second more.
    leader_fallback_timeout: float = setting(
        3.0, "seconds a leader that hears no majority keeps leading before it steps down")
    dns_cache_time: float = setting(5.0, "seconds a resolved peer address is kept")
    # At 5 ms an idle node woke 200 times a second for nothing.
    auto_tick_period: float = setting(
        0.02, "the Raft thread's longest sleep in seconds: messages and proposals wake it at once, so this only "
              "paces timers")
    raft_min_timeout: float = setting(1.0, "the shortest election timeout, seconds")
    raft_max_timeout: float = setting(2.0, "the longest election timeout, seconds")
    append_entries_period: float = setting(0.05, "seconds between a leader's Raft heartbeats")
    append_entries_batch: bool = setting(
        False, "true: send AppendEntries only every append_entries_period (fewer, larger batches); false: as soon "
               "as a command arrives (low latency)")
    compaction_min_entries: int = setting(20000, "log entries before the log is compacted into a snapshot")
    compaction_min_time: float = setting(60.0, "seconds at least between log compactions")
    dynamic_membership: bool = setting(True, "allow `raftpoint members add|remove`")
    dedupe_window_s: float = setting(
        600.0, "seconds a request's answer is remembered for its retries; older retries are refused as too old "
               "to deduplicate (clients retry for 30 s by default)")
    digest_audit_s: float = setting(
        30.0, "seconds between comparisons of this node's content digest with its peers' (0: never); a node that "
              "disagrees with the majority at an index stops")
    log_level: str = setting("info", "debug, info, warning or error")
    auth_tokens_file: str = setting(
        "", "bearer tokens: '<identity> <sha256 of its token>' lines (`raftpoint auth add-token`), re-read when "
            "it changes; with no tokens or bindings file on a plaintext node, auth is off (development only)")
    auth_bindings_file: str = setting("", "a TOML file binding identities to roles, re-read when it changes")
    max_connections: int = setting(2048, "gRPC connections accepted at once (more are closed at once)")
    max_unauthenticated_per_source: int = setting(
        64, "gRPC connections one address may hold before it makes an authenticated call (0: no per-address "
            "cap, gRPC on the port itself)")
    max_rpcs: int = setting(8192, "calls served at once (more are refused RESOURCE_EXHAUSTED)")
    session_ping_s: float = setting(
        3.0, "seconds between HTTP/2 pings on client connections: an agent's open session holds its lease, and "
             "these prove its client alive")
    session_ping_timeout_s: float = setting(3.0, "seconds a ping may go unanswered before the connection is closed")
    statefulset_replicas: int = setting(
        0, "Kubernetes: the StatefulSet's replicas; when set, addresses and peers come from the pod name")
    headless_service: str = setting("", "Kubernetes: the headless Service that names the pods")
    raft_port: int = setting(7000, "Kubernetes: the Raft port of every pod")
    grpc_port: int = setting(50051, "the gRPC port of every pod (and of peers named without one)")
    metrics_port: int = setting(9100, "Kubernetes: the metrics port of every pod")
    probe_port: int = setting(0, "Kubernetes: the plain probe port of every pod (0: none)")
    pod_name: str = setting("", "Kubernetes: this pod's name (default: the host name)")
    tls_cert_file: str = setting(
        "", "the node's certificate (PEM, re-read when it changes); without one the node refuses to start unless "
            "insecure is set")
    tls_key_file: str = setting("", "the node's private key (PEM)")
    tls_client_ca_file: str = setting(
        "", "the CA client certificates are checked against (also what the node trusts when it calls its peers)")
    tls_client_auth: str = setting("none", "whether clients must show a certificate: none or require")
    insecure: bool = setting(False, "serve plaintext gRPC (development only)")
    metrics_plaintext: bool = setting(
        False, "serve /metrics over plain HTTP beside a TLS node (it is HTTPS with the node's certificate "
               "otherwise, and needs a client certificate when tls_client_auth=require)")

    # ---- derived -----------------------------------------------------------------
    def peer_list(self) -> list[Peer]:
        return [Peer.parse(p, self.grpc_port) for p in self.peers if p.strip()]

    def known_hosts(self) -> tuple[str, ...]:
        """The hosts of this node's and its peers' addresses: connections from them
        are the node's own and its peers', kept room for (core.connection_caps)."""
        addresses = [self.raft_address, self.grpc_address, *(a for p in self.peer_list() for a in (p.raft, p.grpc))]
        return tuple(dict.fromkeys(a.rpartition(":")[0].strip("[]") for a in addresses))

    def password(self) -> str:
        if self.raft_password_file:
            try:
                return Path(self.raft_password_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"raft_password_file {self.raft_password_file!r}: {exc.strerror}") from exc
        return self.raft_password

    def grpc_of(self, raft_address: str | None) -> str | None:
        """The gRPC address clients should use for the node with this Raft address."""
        if raft_address is None:
            return None
        if raft_address == self.raft_address:
            return self.grpc_address
        for peer in self.peer_list():
            if peer.raft == raft_address:
                return peer.grpc
        return None

    def validate(self) -> "NodeConfig":
        for name in ("raft_address", "grpc_address", "metrics_address"):
            _check_address(getattr(self, name), name)
        if self.probe_address:
            _check_address(self.probe_address, "probe_address")
        peers = self.peer_list()
        if self.raft_address in {p.raft for p in peers}:
            raise ConfigError("peers must not include this node's own raft_address")
        check_password(self.password())
        if not 0.5 <= self.raft_auth_timeout_s <= 600:
            raise ConfigError("raft_auth_timeout_s must be between 0.5 and 600 seconds")
        if not 1024 <= self.raft_unauthenticated_max_bytes <= 16 << 20:
            raise ConfigError("raft_unauthenticated_max_bytes must be between 1024 and 16 MiB")
        if not 1 <= self.raft_unauthenticated_per_source <= 100_000:
            raise ConfigError("raft_unauthenticated_per_source must be between 1 and 100000")
        if self.store not in ("lmdb", "memory"):
            raise ConfigError(f"store must be 'lmdb' or 'memory', got {self.store!r}")
        if not 0 < self.auto_tick_period <= 0.1:
            raise ConfigError("auto_tick_period must be in (0, 0.1] seconds")
        if not self.append_entries_period * 3 < self.raft_min_timeout < self.raft_max_timeout:
            raise ConfigError("need append_entries_period*3 < raft_min_timeout < raft_max_timeout")
        if self.leader_fallback_timeout <= self.append_entries_period:
            raise ConfigError("leader_fallback_timeout must exceed append_entries_period")
        if not 60 <= self.dedupe_window_s <= 7 * 86400:
            raise ConfigError("dedupe_window_s must be between 60 s and 7 days")
        if self.digest_audit_s != 0 and not 0.5 <= self.digest_audit_s <= 86400:
            raise ConfigError("digest_audit_s must be 0 (off) or between 0.5 s and a day")
        if self.compaction_min_entries < 2:
            raise ConfigError("compaction_min_entries must be >= 2")
        if not 1 <= self.max_connections <= 1_000_000:
            raise ConfigError("max_connections must be between 1 and 1000000")
        if not 0 <= self.max_unauthenticated_per_source <= 1_000_000:
            raise ConfigError("max_unauthenticated_per_source must be between 0 (no per-address cap) and 1000000")
        if not 1 <= self.max_rpcs <= 1_000_000:
            raise ConfigError("max_rpcs must be between 1 and 1000000")
        if not (0.1 <= self.session_ping_s <= 3600 and 0.1 <= self.session_ping_timeout_s <= 3600):
            raise ConfigError("session_ping_s and session_ping_timeout_s must be between 0.1 s and an hour")
        self._validate_tls()
        return self

    def _validate_tls(self) -> None:
        material = (self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)
        if self.insecure:
            if any(material) or self.tls_client_auth != "none":
                raise ConfigError("insecure (plaintext) and TLS settings exclude each other")
            return
        if not (self.tls_cert_file and self.tls_key_file):
            raise ConfigError("TLS is required: give tls_cert_file and tls_key_file (--tls-cert-file/--tls-key-file "
                              "or RAFTPOINT_TLS_CERT_FILE/RAFTPOINT_TLS_KEY_FILE), or --insecure for plaintext")
        if self.tls_client_auth not in CLIENT_AUTH_MODES:
            raise ConfigError(f"tls_client_auth must be one of {', '.join(CLIENT_AUTH_MODES)}, got "
                              f"{self.tls_client_auth!r} (grpcio's server cannot ask for a client certificate "
                              "without requiring one)")
        if self.tls_client_auth == "require" and not self.tls_client_ca_file:
            raise ConfigError("tls_client_auth=require needs tls_client_ca_file (the CA client certificates are "
                              "checked against)")


MIN_PASSWORD_CHARS = 16
# Values the repository ships as examples or placeholders: a cluster started with
# one of them is open to anyone who has read the repository.
PLACEHOLDER_PASSWORDS = frozenset({"change-me", "changeme", "change-me-base64-32-bytes", "secret", "password"})
_PASSWORD_SOURCES = "raft_password_file, RAFTPOINT_RAFT_PASSWORD or raft_password in the TOML file"
_PASSWORD_FIELDS = ("raft_password", "raft_password_file")


def check_password(password: str) -> None:
    """Refuse a missing, short or example Raft password: the Raft port speaks pickle,
    and the password is all that keeps a stranger from running code on the node."""
    if not password:
        raise ConfigError(f"a Raft password is required ({_PASSWORD_SOURCES}): the Raft port speaks pickle "
                          "and must be authenticated; generate one with `openssl rand -base64 32`")
    if password.lower() in PLACEHOLDER_PASSWORDS:
        raise ConfigError("the Raft password is the example value from the repository; "
                          "generate one with `openssl rand -base64 32`")
    if len(password) < MIN_PASSWORD_CHARS:
        raise ConfigError(f"the Raft password has {len(password)} characters, fewer than {MIN_PASSWORD_CHARS}; "
                          "generate one with `openssl rand -base64 32`")


def _statefulset_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """Addresses from `<set>-<ordinal>.<headless>`: pod IPs change, stable names do not."""
    replicas = int(values.get("statefulset_replicas") or 0)
    if replicas <= 0:
        return {}
    headless = values.get("headless_service") or ""
    if not headless:
        raise ConfigError("headless_service is required with statefulset_replicas")
    pod = values.get("pod_name") or socket.gethostname()
    base, sep, ordinal = pod.rpartition("-")
    if not sep or not ordinal.isdigit():
        raise ConfigError(f"pod name {pod!r} is not <statefulset>-<ordinal>")
    raft_port, grpc_port = int(values.get("raft_port", 7000)), int(values.get("grpc_port", 50051))
    metrics_port = int(values.get("metrics_port", 9100))
    probe_port = int(values.get("probe_port") or 0)

    def name(i: int) -> str:
        return f"{base}-{i}.{headless}"

    me = int(ordinal)
    # Every port binds the pod's own stable name (its pod IP), as DESIGN asks for Raft.
    return {
        "raft_address": f"{name(me)}:{raft_port}",
        "grpc_address": f"{name(me)}:{grpc_port}",
        "metrics_address": f"{name(me)}:{metrics_port}",
        "peers": tuple(f"{name(i)}:{raft_port}={name(i)}:{grpc_port}" for i in range(replicas) if i != me),
        **({"probe_address": f"{name(me)}:{probe_port}"} if probe_port else {}),
    }


_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig)}


def _coerce(name: str, value: Any) -> Any:
    default = _FIELDS[name].default
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes")
            return bool(value)
        if isinstance(default, tuple):
            return tuple(p for p in (value.split(",") if isinstance(value, str) else value) if str(p).strip())
        return type(default)(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: cannot use {value!r} as {type(default).__name__}") from exc


def load(file: str | None = None, env: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> NodeConfig:
    values = _layered(file, env, flags)
    values.update(_statefulset_overrides(values))
    return NodeConfig(**values).validate()


def load_password(file: str | None = None, env: Mapping[str, str] | None = None,
                  flags: Mapping[str, Any] | None = None) -> str:
    """The node's Raft password from the node's own sources (add_password_flags), for a
    tool run beside a stopped node: the rest of its settings need not be complete."""
    values = _layered(file, env, flags)
    password = NodeConfig(**{name: values[name] for name in _PASSWORD_FIELDS if name in values}).password()
    check_password(password)
    return password


def _layered(file: str | None, env: Mapping[str, str] | None, flags: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings given: the TOML file's, overridden by RAFTPOINT_* variables, overridden by flags."""
    env = os.environ if env is None else env
    _refuse_unknown_env(env)
    values: dict[str, Any] = {}
    file = file or env.get(CONFIG_ENV)
    if file:
        try:
            doc = tomllib.loads(Path(file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {file!r}: {exc}") from exc
        unknown = set(doc) - set(_FIELDS)
        if unknown:
            raise ConfigError(f"config file {file!r}: unknown settings "
                              + ", ".join(_did_you_mean(name, _FIELDS) for name in sorted(unknown)))
        values.update({k: _coerce(k, v) for k, v in doc.items()})
    for name in _FIELDS:
        if ENV_PREFIX + name.upper() in env:
            values[name] = _coerce(name, env[ENV_PREFIX + name.upper()])
    for name, value in (flags or {}).items():
        if value is not None:
            values[name] = _coerce(name, value)
    return values


# Settings that are gone, and what replaces them (named when a configuration still sets one).
RETIRED = {"metrics_tls": "retired: /metrics is served over TLS whenever the node has TLS; "
                          "metrics_plaintext=true serves plain HTTP instead"}


def _did_you_mean(name: str, known: Collection[str]) -> str:
    retired = RETIRED.get(name.removeprefix(ENV_PREFIX).lower())
    if retired:
        return f"{name!r} ({retired})"
    close = difflib.get_close_matches(name, known, n=1)
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


def _refuse_unknown_env(env: Mapping[str, str]) -> None:
    """A misspelled RAFTPOINT_* variable was silently ignored, and the node ran with
    the default the operator meant to change."""
    known = {CONFIG_ENV, TRACE_FILE_ENV, *CLIENT_ENV, *(ENV_PREFIX + name.upper() for name in _FIELDS)}
    unknown = sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in known
                     and not k.startswith(FOREIGN_ENV_PREFIXES))
    if unknown:
        raise ConfigError("unknown environment variable " + ", ".join(_did_you_mean(k, known) for k in unknown)
                          + "; every RAFTPOINT_* variable must name a node setting")


# Settings with no flag: a secret on a command line is visible to every user in `ps`.
NO_FLAG = frozenset({"raft_password"})


class _RefusedSecretFlag(argparse.Action):
    """`--raft-password`, refused with the ways that keep it out of `ps` (without it,
    argparse would take it as an abbreviation of --raft-password-file)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} is not accepted (a command line is visible in `ps`): use "
                     "--raft-password-file, RAFTPOINT_RAFT_PASSWORD or raft_password in the --config file")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Flags for every field but the secrets (dest = field name; None means 'not given')."""
    parser.add_argument("--config", help="TOML file with node settings")
    _refuse_secret_flags(parser)
    for name, f in _FIELDS.items():
        if name in NO_FLAG:
            continue
        flag = "--" + name.replace("_", "-")
        shown = ",".join(f.default) if isinstance(f.default, tuple) else str(f.default).lower() \
            if isinstance(f.default, bool) else f.default
        help_text = f"{f.metadata['help']} (env {ENV_PREFIX}{name.upper()}; default: {shown!r})"
        if isinstance(f.default, bool):  # `--insecure` alone means true
            parser.add_argument(flag, dest=name, default=None, nargs="?", const="true", choices=("true", "false"),
                                help=help_text)
        else:
            parser.add_argument(flag, dest=name, default=None, help=help_text)


def add_password_flags(parser: argparse.ArgumentParser) -> None:
    """--config and --raft-password-file, for a tool that needs the node's Raft password
    (password_from_args); RAFTPOINT_RAFT_PASSWORD is read as by the node."""
    parser.add_argument("--config", help="the node's TOML settings file (its raft_password or raft_password_file)")
    _refuse_secret_flags(parser)
    parser.add_argument("--raft-password-file", dest="raft_password_file", default=None,
                        help="file holding the node's Raft password (or RAFTPOINT_RAFT_PASSWORD, or the --config file)")


def password_from_args(args: argparse.Namespace) -> str:
    return load_password(args.config, flags={"raft_password_file": args.raft_password_file})


def _refuse_secret_flags(parser: argparse.ArgumentParser) -> None:
    for name in NO_FLAG:
        parser.add_argument("--" + name.replace("_", "-"), dest="_refused_" + name, action=_RefusedSecretFlag,
                            help=argparse.SUPPRESS)


def from_args(args: argparse.Namespace) -> NodeConfig:
    return load(args.config, flags={name: getattr(args, name, None) for name in _FIELDS if name not in NO_FLAG})
