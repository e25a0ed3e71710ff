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


@dataclass(frozen=True)
class NodeConfig:
    raft_address: str = "127.0.0.1:7000"
    grpc_address: str = "127.0.0.1:50051"
    metrics_address: str = "127.0.0.1:9100"
    # Plain HTTP serving GET /livez and /readyz only ("": none; the metrics port serves
    # them too). For a kubelet, which shows no client certificate to a metrics port
    # that requires one (deploy/README.md, "Probes").
    probe_address: str = ""
    # Raft peers other than this node, "raft_host:port[=grpc_host:port]".
    peers: tuple[str, ...] = ()
    data_dir: str = "./raftpoint-data"
    # The Raft password: from raft_password_file, RAFTPOINT_RAFT_PASSWORD or the TOML
    # file, never a flag (a command line is visible to every user in `ps`).
    raft_password: str = ""
    raft_password_file: str = ""
    # The Raft port: a connection must authenticate (and name its node) within
    # raft_auth_timeout_s, and may announce messages of at most
    # raft_unauthenticated_max_bytes until it has.
    raft_auth_timeout_s: float = 5.0
    raft_unauthenticated_max_bytes: int = 65536
    # One address may hold at most this many Raft connections that have not authenticated.
    raft_unauthenticated_per_source: int = 16
    store: str = "lmdb"
    map_size_mb: int = 1024
    max_map_size_mb: int = 65536
    # etcd's election timeout (1 s) and a leader fallback above its widest draw: a
    # leader saturated by thousands of agents' keepalives runs its Raft ticks late,
    # and with 0.4-1 s it lost the lead 44 times in one run at 5,000 agents, and agents
    # that were alive were declared failed (1,309); with these, neither happened
    # (benchmarks/agents_scale.py). raft_min_timeout and raft_max_timeout below go with
    # it. Failover costs about a second more.
    leader_fallback_timeout: float = 3.0
    dns_cache_time: float = 5.0
    # The Raft thread's longest sleep: messages and proposals wake it at once, so this
    # only paces timers (heartbeats every append_entries_period, election timeouts).
    # At 5 ms an idle node woke 200 times a second for nothing.
    auto_tick_period: float = 0.02
    raft_min_timeout: float = 1.0
    raft_max_timeout: float = 2.0
    append_entries_period: float = 0.05
    # False: send AppendEntries as soon as a command arrives (low latency); True: only
    # every append_entries_period (fewer, larger batches).
    append_entries_batch: bool = False
    compaction_min_entries: int = 20000
    compaction_min_time: float = 60.0
    dynamic_membership: bool = True
    # Answers to requests first sent longer ago than this are forgotten, and such
    # requests refused as too old to deduplicate (clients retry for 30 s by default).
    dedupe_window_s: float = 600.0
    # Seconds between comparisons of this node's content digest with its peers' (0: never);
    # a node that disagrees with the majority at an index stops (service/digest_audit.py).
    digest_audit_s: float = 30.0
    log_level: str = "info"
    # Authentication and roles (coordinator/transport/auth.py): a file of
    # "<identity> <sha256 of its token>" lines (bearer tokens; `raftpoint auth
    # add-token` writes it), and a TOML file binding identities to roles. Both are
    # re-read when they change. Neither set on a plaintext node: auth is off (dev mode).
    auth_tokens_file: str = ""
    auth_bindings_file: str = ""
    # gRPC connections this node accepts at once (more are closed at once), and calls
    # it serves at once (more are refused RESOURCE_EXHAUSTED). Every agent holds one
    # connection and one long-lived WatchOrders call on the leader. One address may
    # hold at most max_unauthenticated_per_source connections that have not made an
    # authenticated call yet (0: no per-address cap, gRPC on the port itself;
    # transport/server.py::ServerLimits).
    max_connections: int = 2048
    max_unauthenticated_per_source: int = 64
    max_rpcs: int = 8192
    # HTTP/2 pings on every client connection (transport/server.py::ServerLimits): an
    # agent's open session holds its lease, and these prove the session's client alive.
    session_ping_s: float = 3.0
    session_ping_timeout_s: float = 3.0
    # Kubernetes: when set, derive raft/grpc addresses and peers from the pod name.
    statefulset_replicas: int = 0
    headless_service: str = ""
    raft_port: int = 7000
    grpc_port: int = 50051
    metrics_port: int = 9100
    probe_port: int = 0
    pod_name: str = ""
    # TLS on the gRPC port (transport/tls.py): the node's certificate and key (PEM, re-read
    # when the files change), the CA client certificates are checked against (also
    # what this node trusts when it calls its peers), and whether clients must show
    # one: "none" or "require". Without a certificate the node refuses to start unless
    # `insecure` (plaintext) is set.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    tls_client_auth: str = "none"
    insecure: bool = False
    # /metrics is served over HTTPS with the node's certificate whenever the node has
    # TLS (with tls_client_auth=require the scraper must show a certificate signed by
    # tls_client_ca_file); plain HTTP beside a TLS node only when this is set.
    metrics_plaintext: bool = False

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
        if isinstance(f.default, bool):  # `--insecure` alone means true
            parser.add_argument(flag, dest=name, default=None, nargs="?", const="true", choices=("true", "false"))
        else:
            parser.add_argument(flag, dest=name, default=None, help=f"default: {f.default!r}")


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
