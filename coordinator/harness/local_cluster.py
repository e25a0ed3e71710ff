"""A cluster of `raftpoint coordinator` processes on loopback.

Shared by `raftpoint cluster up`, the demo, the tests and the benchmarks: every
wait has a deadline, every process is stopped on close, addresses are 127.0.0.1.
Nodes serve TLS with certificates of a throw-away CA kept in <root>/tls (ca.crt,
node<i>.crt, client-<identity>.crt), and require a client certificate from it;
`client_tls(identity)` gives a client's settings. `insecure=True` runs plaintext.
"""
from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, TypeVar

import grpc

from coordinator.api.metadata import bearer
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.endpoints_file import LayoutMismatch, NodeAddresses, read_layout, write_layout
from coordinator.harness.certs import Issued, LocalCA
from coordinator.harness.parent_death import stop_with_parent

T = TypeVar("T")
PASSWORD_FILE = "raft-password"
TLS_DIR = "tls"
ADMIN = "admin"


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.05) -> T:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# Below the kernel's ephemeral range, where no outgoing connection takes a port: a
# cluster restarted on its recorded ports must find them free, and a port in the
# ephemeral range can be taken meanwhile by any process's outgoing connection.
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000
_PICK_ATTEMPTS = 200


def free_ports(n: int, hosts: Collection[str] = ("127.0.0.1",)) -> list[int]:
    """`n` distinct ports nothing is bound to now on any of the loopback addresses
    `hosts`, outside the ephemeral range when the machine leaves room below it (else
    any free ports the kernel hands out). A port free on one loopback address can be
    taken on another (a cluster whose nodes bind 127.0.1.x beside this one), so each
    is checked on every address it will be used on."""
    distinct = tuple(dict.fromkeys(hosts))
    if not distinct:
        raise ValueError("free_ports needs at least one address to check the ports on")
    low = _ephemeral_low()
    held: list[list[socket.socket]] = []
    try:
        if low - _LOWEST_PORT >= n:
            for port in random.sample(range(_LOWEST_PORT, low), min(_PICK_ATTEMPTS, low - _LOWEST_PORT)):
                if len(held) == n:
                    break
                if (socks := _bound(distinct, port)) is not None:
                    held.append(socks)
        for _ in range(_PICK_ATTEMPTS):
            if len(held) == n:
                break
            if (socks := _bound(distinct, 0)) is not None:
                held.append(socks)
        if len(held) < n:
            raise OSError(f"found {len(held)} of {n} ports free on every one of {sorted(distinct)}")
        return [socks[0].getsockname()[1] for socks in held]
    finally:
        for socks in held:
            for sock in socks:
                sock.close()


def _bound(hosts: tuple[str, ...], port: int) -> list[socket.socket] | None:
    """Sockets bound to `port` (0: one the kernel picks on the first host) on each of
    the distinct `hosts`, held so that no later pick returns it; None if one host has
    it taken."""
    socks: list[socket.socket] = []
    for host in hosts:
        sock = socket.socket()
        socks.append(sock)
        try:
            sock.bind((host, port))
        except OSError:
            for s in socks:
                s.close()
            return None
        port = sock.getsockname()[1]
    return socks


def _ephemeral_low() -> int:
    try:
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _LOWEST_PORT  # unknown: no room below it, so the kernel picks


@dataclass
class NodeProcess:
    index: int
    raft: str
    grpc: str
    metrics: str
    data_dir: Path
    process: subprocess.Popen | None = None
    # How an admin client reaches this node (its cluster's CA and admin certificate).
    tls: ClientTLS | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def channel(self) -> grpc.Channel:
        """A channel to this node's gRPC port, as the cluster's admin client."""
        return ClientTLS.from_env().channel(self.grpc) if self.tls is None else self.tls.channel(self.grpc)

    def status(self, timeout: float = 1.0) -> pb.NodeStatus | None:
        """The node's own status; None when it does not answer."""
        return node_status(self.grpc, timeout, self.tls)


# The admin token (and its file) of each gRPC address of a harness cluster this process
# started, proxied addresses included: status probes and the chaos suite's clients
# and agent processes, which know a cluster only by its endpoints, find it here.
_ACCESS: dict[str, tuple[str, Path]] = {}


def register_access(addresses: Collection[str], token: str, token_file: Path) -> None:
    _ACCESS.update((a, (token, token_file)) for a in addresses)


def harness_access(endpoints: Collection[str]) -> tuple[str, Path] | None:
    """The admin token and token file of the harness cluster at `endpoints`, if any."""
    return next((_ACCESS[e] for e in endpoints if e in _ACCESS), None)


def credentials_for(grpc_address: str) -> tuple[tuple[str, str], ...]:
    """Call metadata with the admin token of the harness node at `grpc_address` (none
    for a node this process did not start, or one without authentication)."""
    access = harness_access([grpc_address])
    return bearer(access[0] if access else None)


def node_status(grpc_address: str, timeout: float = 1.0, tls: ClientTLS | None = None,
                token: str | None = None) -> pb.NodeStatus | None:
    """The node's own status; None when it does not answer. `tls`: None reads the
    environment; `token`: default, the admin token of the harness cluster there."""
    tls = ClientTLS.from_env() if tls is None else tls
    metadata = bearer(token) if token else credentials_for(grpc_address)
    try:
        with tls.channel(grpc_address) as channel:
            return pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=timeout,
                                                                   metadata=metadata).node
    except grpc.RpcError:
        return None


DEFAULT_PROGRAM = [sys.executable, "-m", "coordinator"]
PeerSpec = Callable[[NodeProcess], str]


def direct_peer(peer: NodeProcess) -> str:
    """The --peers entry every node gets for `peer`: the peer's own addresses."""
    return f"{peer.raft}={peer.grpc}"


class LocalCluster:
    def __init__(self, root: Path, size: int = 3, *, settings: dict[str, object] | None = None,
                 password: str | None = None, base_port: int | None = None, hosts: list[str] | None = None,
                 peer_spec: PeerSpec = direct_peer,
                 program: Callable[[int], list[str]] | None = None,
                 addresses: list[tuple[str, str, str]] | None = None, auth: bool = True,
                 insecure: bool = False) -> None:
        """`base_port`: node i gets raft/grpc/metrics on base+3i, +1, +2 (stable addresses for
        a cluster you talk to by hand); without it, free ports are picked (tests, benchmarks).

        The hooks let a harness put something between the nodes (the chaos suite's
        proxies): `hosts[i]` is the loopback address node i binds (default 127.0.0.1),
        `peer_spec(peer)` what every node is told about `peer` (pysyncobj needs one name
        per node everywhere), and `program(i)` the command before the node's flags
        that runs node i with the node's flags after it (e.g. a bug-planting wrapper).
        `addresses[i]`: node i's (raft, grpc, metrics), as recorded by an earlier run
        (see reopen()). `auth`: nodes require a bearer token; `token` is an admin one
        (write_auth_config), for every client of this cluster. `insecure`: plaintext gRPC
        (nodes get --insecure) instead of TLS."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.password = password or secrets.token_hex(16)
        self.settings = dict(settings or {})
        self.token: str | None = None
        if auth:
            auth_settings, self.token = write_auth_config(self.root)
            self.settings = {**auth_settings, **self.settings}
        self.peer_spec = peer_spec
        self.program = program
        hosts = hosts or ["127.0.0.1"] * size
        if len(hosts) != size:
            raise ValueError(f"need one host per node: {size} nodes, {len(hosts)} hosts")
        if addresses is None:
            ports = free_ports(3 * size, hosts) if base_port is None else list(range(base_port, base_port + 3 * size))
            addresses = [(f"{host}:{ports[3 * i]}", f"{host}:{ports[3 * i + 1]}", f"{host}:{ports[3 * i + 2]}")
                         for i, host in enumerate(hosts)]
        if len(addresses) != size:
            raise ValueError(f"need one address triple per node: {size} nodes, {len(addresses)} triples")
        self.nodes = [NodeProcess(i, raft, grpc, metrics, self.root / f"node{i}")
                      for i, (raft, grpc, metrics) in enumerate(addresses)]
        if self.token:
            register_access([n.grpc for n in self.nodes], self.token, self.token_file)
        self.log_files: list = []
        self.insecure = insecure
        # Set by programs that start nodes from their main thread and must not leave
        # them running if killed (harness/parent_death.py says why not for others).
        self.stop_nodes_with_this_process = False
        self.ca: LocalCA | None = None if insecure else LocalCA.load_or_create(self.root / TLS_DIR)
        self._hosts = sorted({host for n in self.nodes for host in (n.grpc.rsplit(":", 1)[0],)})
        for n in self.nodes:
            n.tls = self.client_tls()

    # ---- TLS ----------------------------------------------------------------------
    def client_tls(self, identity: str | None = ADMIN) -> ClientTLS:
        """Settings for a client of this cluster: its CA and a certificate for `identity`
        (None: no client certificate, which these nodes refuse); plaintext if insecure."""
        return ClientTLS.plaintext() if self.ca is None else self.ca.client_tls(identity)

    def server_certificate(self, node: NodeProcess) -> Issued:
        """Node's certificate (made on first use): SANs every node's host, 127.0.0.1 and
        localhost, so a node is reachable under its own address and through a proxy."""
        assert self.ca is not None
        cert = self.ca.directory / f"node{node.index}.crt"
        if cert.exists():
            return Issued(cert, cert.with_suffix(".key"), 0)
        return self.ca.server(f"node{node.index}", [node.grpc.rsplit(":", 1)[0], *self._hosts])

    def _tls_flags(self, node: NodeProcess) -> list[str]:
        if self.ca is None:
            return ["--insecure"]
        issued = self.server_certificate(node)
        # Metrics stay plain HTTP on these loopback clusters (scraped by tests and by hand).
        return ["--tls-cert-file", str(issued.cert_file), "--tls-key-file", str(issued.key_file),
                "--tls-client-ca-file", str(self.ca.ca_file), "--tls-client-auth", "require", "--metrics-plaintext"]

    @classmethod
    def reopen(cls, root: Path, size: int, *, base_port: int | None = None) -> "LocalCluster":
        """The cluster `root` holds, on the addresses and with the Raft password it was
        first started with; a new one (whose password is kept in `root`) if it holds none.

        Raft records its members' addresses in the journal and snapshots: a cluster
        restarted on new ports never elects a leader. Raises LayoutMismatch when the
        recorded cluster has another size, or other ports than `base_port` gives."""
        root = Path(root)
        recorded = read_layout(root)
        password = _kept_password(root)
        if recorded is None:
            return cls(root, size, base_port=base_port, password=password)
        if len(recorded) != size:
            raise LayoutMismatch(f"{root} holds a {len(recorded)}-node cluster, not {size} nodes: "
                                 f"use -n {len(recorded)}, or another data dir")
        if base_port is not None:
            asked = cls(root, size, base_port=base_port, password=password)
            if [(n.raft, n.grpc, n.metrics) for n in asked.nodes] != [r.as_tuple() for r in recorded]:
                raise LayoutMismatch(f"{root} holds a cluster on ports {_ports(recorded)}, not from {base_port}: "
                                     "leave out --base-port to reuse them, or use another data dir")
        return cls(root, size, password=password, addresses=[r.as_tuple() for r in recorded])

    # ---- processes ----------------------------------------------------------------
    def command(self, node: NodeProcess, members: list[int] | None = None) -> list[str]:
        """`members`: the node indexes forming the cluster this node starts with (default: all)."""
        chosen = [n for n in self.nodes if members is None or n.index in members]
        peers = ",".join(self.peer_spec(n) for n in chosen if n is not node)
        program = DEFAULT_PROGRAM if self.program is None else self.program(node.index)
        args = [*program, "--raft-address", node.raft,
                "--grpc-address", node.grpc, "--metrics-address", node.metrics, "--peers", peers,
                "--data-dir", str(node.data_dir), *self._tls_flags(node)]
        for key, value in self.settings.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        return args

    def start(self, index: int, members: list[int] | None = None) -> NodeProcess:
        node = self.nodes[index]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"node{index}.log", "ab")
        self.log_files.append(log)
        env = {**os.environ, "RAFTPOINT_RAFT_PASSWORD": self.password}
        node.process = subprocess.Popen(
            self.command(node, members), stdout=log, stderr=log, env=env, start_new_session=True,
            preexec_fn=stop_with_parent() if self.stop_nodes_with_this_process else None)
        return node

    def start_all(self, count: int | None = None) -> "LocalCluster":
        """Start the first `count` nodes (default all) as one cluster."""
        members = list(range(len(self.nodes) if count is None else count))
        for i in members:
            self.start(i, members)
        self.write_endpoints()
        return self

    def signal(self, index: int, sig: int) -> None:
        node = self.nodes[index]
        if node.process is not None:
            node.process.send_signal(sig)

    def kill(self, index: int) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        node = self.nodes[index]
        if node.alive:
            node.process.kill()
        if node.process is not None:
            node.process.wait(10)

    def restart(self, index: int, *, crash: bool = True) -> NodeProcess:
        """Kill -9 (or, with crash=False, stop cleanly) and start again on the same data dir."""
        (self.kill if crash else self.stop)(index)
        return self.start(index)

    def stop(self, index: int, timeout: float = 10.0) -> None:
        node = self.nodes[index]
        if not node.alive:
            return
        node.process.terminate()
        try:
            node.process.wait(timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(10)

    def close(self, timeout: float = 10.0) -> None:
        """SIGTERM every node at once (so shutdowns overlap), SIGKILL what is left at the deadline."""
        live = [n for n in self.nodes if n.alive]
        for node in live:
            node.process.terminate()
        end = time.monotonic() + timeout
        for node in live:
            try:
                node.process.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(10)
        for log in self.log_files:
            log.close()
        self.log_files.clear()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- observation --------------------------------------------------------------
    def statuses(self, exclude: Collection[int] = ()) -> dict[int, pb.NodeStatus]:
        """Status of every running node that answers, except the `exclude`d (e.g. nodes
        known to be stopped with SIGSTOP, which would only time out)."""
        return {n.index: s for n in self.nodes
                if n.alive and n.index not in exclude and (s := n.status()) is not None}

    def leader(self, timeout: float = 30.0) -> NodeProcess:
        def find() -> NodeProcess | None:
            for i, s in self.statuses().items():
                if s.role == "leader":
                    return self.nodes[i]
            return None
        return wait_for(find, "a leader", timeout, 0.1)

    def converged(self, timeout: float = 30.0) -> str:
        """Wait until every live node has applied the same index with the same digest."""
        def same() -> str | None:
            live = [n for n in self.nodes if n.alive]
            st = self.statuses()
            if len(st) != len(live) or not st:
                return None
            if len({s.applied_index for s in st.values()}) == 1 and len({s.content_digest for s in st.values()}) == 1:
                return next(iter(st.values())).content_digest
            return None
        return wait_for(same, "nodes to converge", timeout, 0.1)

    def endpoints(self) -> list[str]:
        return [n.grpc for n in self.nodes]

    @property
    def token_file(self) -> Path:
        """Where the admin token is kept (for `--token-file`)."""
        return self.root / AUTH_DIR / ADMIN_TOKEN_FILE

    @property
    def credentials(self) -> tuple[tuple[str, str], ...]:
        """Call metadata with the cluster's admin token (none without authentication)."""
        return bearer(self.token)

    def write_endpoints(self) -> None:
        write_layout(self.root, [NodeAddresses(n.raft, n.grpc, n.metrics) for n in self.nodes],
                     [n.process.pid if n.process else None for n in self.nodes])


def _ports(layout: list[NodeAddresses]) -> str:
    ports = sorted(int(a.rsplit(":", 1)[1]) for node in layout for a in node.as_tuple())
    return f"{ports[0]}-{ports[-1]}"


AUTH_DIR = "auth"
ADMIN_TOKEN_FILE = "admin.token"
TOKENS_FILE, BINDINGS_FILE = "tokens", "bindings.toml"


def write_auth_config(root: Path) -> tuple[dict[str, str], str]:
    """Turn authentication on for the cluster in `root`: a tokens file with one admin
    token and the bindings that make it admin. Returns the node settings that name
    the files, and the token (kept owner-only in `root`, so a reopened cluster and
    the `raftpoint cluster` commands find the same one)."""
    from coordinator.transport.auth import token_hash

    directory = Path(root) / AUTH_DIR
    directory.mkdir(parents=True, exist_ok=True)
    token = _kept_secret(directory / ADMIN_TOKEN_FILE)
    tokens, bindings = directory / TOKENS_FILE, directory / BINDINGS_FILE
    if not tokens.exists():
        tokens.write_text(f"# <identity> <sha256 of its bearer token>\nharness-admin {token_hash(token)}\n")
    if not bindings.exists():
        # The token's identity, and the common name of the harness's client certificate
        # (client_tls()): either way a harness client is this cluster's admin.
        bindings.write_text(f'["harness-admin"]\nrole = "admin"\n\n["{ADMIN}"]\nrole = "admin"\n')
    return {"auth_tokens_file": str(tokens), "auth_bindings_file": str(bindings)}, token


def admin_token(root: Path) -> str | None:
    """The admin token of the cluster in `root`, if it runs with authentication."""
    try:
        return (Path(root) / AUTH_DIR / ADMIN_TOKEN_FILE).read_text().strip()
    except FileNotFoundError:
        return None


def _kept_secret(path: Path, make: Callable[[], str] = lambda: secrets.token_urlsafe(32)) -> str:
    """A random secret kept in `path` (owner-only), made on first use."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        secret = make()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
        return secret


def _kept_password(root: Path) -> str:
    """The Raft password kept in `root` (owner-only), made on first use."""
    Path(root).mkdir(parents=True, exist_ok=True)
    return _kept_secret(Path(root) / PASSWORD_FILE, lambda: secrets.token_hex(16))
