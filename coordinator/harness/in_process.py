"""An in-process coordinator for unit-testing agents without a cluster.

Agents reach it through `agent_client.testing` (the `raftpoint.testing` entry point),
never by importing this module. It serves the real gRPC API (the same servicers, validation, state machine, leases
and epoch timer) on 127.0.0.1, from a single in-memory replica that applies each
proposal at once: no Raft, no LMDB, nothing to install. Use it as a context manager:

    with InProcessCoordinator() as coordinator:
        client = AgentClient("g", "a", [coordinator.address], tmp_path, snapshot=...,
                             tls=coordinator.client_tls())

Like a node, it serves TLS, with a throw-away CA made for it (deleted on stop), and
asks clients for a certificate only with `client_auth="require"`;
`client_tls(identity)` gives the settings a client needs. `insecure=True` serves
plaintext.

It runs inside the user's test process, so it writes nothing to the user's stdout or
stderr unless asked: its log records go to the stdlib loggers "raftpoint" and
"coordinator", which the user's own logging configuration shows or not
(`verbose=True` prints them to stderr).
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import structlog

from coordinator.channels import ClientTLS
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import free_ports, node_status, wait_for
from coordinator.core.commands import Proposal
from coordinator.replication.applier import apply_entry_bytes
from coordinator.replication.leader_clock import LeaderClock
from coordinator.replication.replica import BatchTrace, Callback, ChangeListener, NodeStatus
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import RESULT, KvState, RecordCache, agent_changes
from coordinator.storage import keys

LOCAL = "in-process"
LOGGERS = ("raftpoint", "coordinator")


def route_logs_to_stdlib(verbose: bool) -> None:
    """structlog unconfigured prints to stdout: send its lines to stdlib logging instead
    (unless the process configured structlog itself), and keep the coordinator's
    loggers quiet unless `verbose` or the user's logging configuration shows them."""
    if not structlog.is_configured():
        structlog.configure(processors=[structlog.contextvars.merge_contextvars, structlog.stdlib.render_to_log_kwargs],
                            logger_factory=structlog.stdlib.LoggerFactory(),
                            wrapper_class=structlog.stdlib.BoundLogger)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if verbose and not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.NullHandler)
                               for h in logger.handlers):
            logger.addHandler(logging.StreamHandler())
            logger.setLevel(logging.INFO)
        elif not logger.handlers:
            logger.addHandler(logging.NullHandler())  # no "last resort" printing of warnings


class _Addresses:
    def __init__(self, grpc_address: str) -> None:
        self.grpc_address = grpc_address

    def grpc_of(self, raft_address: str | None) -> str | None:
        return self.grpc_address if raft_address == LOCAL else None


class LocalReplica:
    """A replica of one: always the leader, every proposal applied and 'durable' at once."""

    def __init__(self, grpc_address: str) -> None:
        self.config = _Addresses(grpc_address)
        self._store = MemoryStore()
        self._records = RecordCache(self._store)
        self._lock = threading.Lock()
        self._index = 0
        self._listener: ChangeListener | None = None

    def propose(self, data: bytes, callback: Callback, decoded: Proposal | None = None,
                trace: BatchTrace | None = None) -> None:
        with self._lock:
            if trace is not None:
                trace.committed_ns = time.time_ns()  # one replica: its own copy is the majority
            self._index += 1
            result = apply_entry_bytes(self._records, data, decoded)
            changes = agent_changes(self._records.pending)
            self._records.commit(self._index)
        if self._listener is not None and changes:
            self._listener(changes)
        callback(result, None)

    def read_index(self, done: Callable[[str | None], None]) -> None:
        done(None)  # one replica, always the leader, every proposal applied at once

    def read_state(self) -> KvState:
        return KvState(self._store)

    def on_agent_changes(self, listener: ChangeListener | None) -> None:
        self._listener = listener

    def status(self) -> NodeStatus:
        return NodeStatus(node=LOCAL, role="leader", term=1, commit_index=self._index, applied_index=self._index,
                          raft_applied_index=self._index, log_entries=0, leader=LOCAL, has_quorum=True,
                          last_snapshot_index=0, last_snapshot_age_s=-1.0, last_snapshot_bytes=0)

    def digest(self) -> str:
        return self._store.digest()

    def digest_with_index(self) -> tuple[int, str]:
        return self._store.digest_with_index()

    def state_digest(self) -> str:
        return self._store.digest(skip=keys.prefix(RESULT))

    def is_leader(self) -> bool:
        return True

    def leader_raft_address(self) -> str | None:
        return LOCAL

    def tick_lag_since(self, since: float) -> float:
        return 0.0  # no Raft thread to fall behind


class InProcessCoordinator:
    def __init__(self, startup_timeout: float = 10.0, *, verbose: bool = False,
                 clock: LeaderClock | None = None, insecure: bool = False, client_auth: str = "none") -> None:
        """`verbose`: the coordinator's log lines to stderr; `clock`: the leader's clock, for
        tests that step its wall clock; `insecure`: plaintext instead of TLS; `client_auth`:
        "require" refuses clients without a certificate of its CA."""
        route_logs_to_stdlib(verbose)
        self._tls_dir = None if insecure else Path(tempfile.mkdtemp(prefix="raftpoint-in-process-tls-"))
        self.ca = None if self._tls_dir is None else LocalCA.create(self._tls_dir)
        self.client_auth = client_auth
        self.clock = clock
        self.address = f"127.0.0.1:{free_ports(1)[0]}"
        self.replica = LocalReplica(self.address)
        self._startup_timeout = startup_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="raftpoint-testing", daemon=True)

    def _run(self) -> None:
        from coordinator.service.node_server import serve  # grpc.aio server, imported where it runs
        from coordinator.transport.tls import ServerTLS

        tls = None
        if self.ca is not None:
            issued = self.ca.server("node")
            tls = ServerTLS(str(issued.cert_file), str(issued.key_file), str(self.ca.ca_file), self.client_auth)

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.replica, self.address, self._stop, clock=self.clock, tls=tls)

        asyncio.run(main())

    def start(self) -> "InProcessCoordinator":
        self._thread.start()
        admin = self.client_tls()
        wait_for(lambda: node_status(self.address, tls=admin) is not None, "the in-process coordinator",
                 self._startup_timeout)
        return self

    def client_tls(self, identity: str | None = "admin") -> ClientTLS:
        """What a client of this coordinator needs: its CA, and a certificate for
        `identity` (None: none); plaintext settings when it runs insecure."""
        return ClientTLS.plaintext() if self.ca is None else self.ca.client_tls(identity)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)

    def __enter__(self) -> "InProcessCoordinator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


