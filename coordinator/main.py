"""Run one coordinator node: the composition root that wires storage, Raft and gRPC.

`python -m coordinator <flags>` and `raftpoint coordinator <flags>` both end here.
It lives in the server package (not in the console application) so that anything
that must start a node process, such as the chaos suite's bug-planting wrapper,
can do so without importing the application layer above it.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys
from pathlib import Path

from coordinator import config, tracing
from coordinator.channels import ClientTLS
from coordinator.config import ConfigError, NodeConfig
from coordinator.observability import gc_pauses, metrics, metrics_server
from coordinator.observability.health_report import HealthReport
from coordinator.observability.logging import configure_logging
from coordinator.replication.fail_stop import fail_stop
from coordinator.replication.journal_format import JournalFormatError
from coordinator.replication.node import CoordinatorNode
from coordinator.replication.pysyncobj_adapter import UnsupportedPysyncobj
# Chaos seam: `skip-replay` (chaos/planted.py) replaces main.open_store, which open_node calls by this name.
from coordinator.storage import open_store
from coordinator.storage.dir_lock import DataDirLock
from coordinator.service import ports
from coordinator.storage.protocol import EXIT_DAMAGED, REBUILD_FROM_PEERS, STORE_DIR, DamagedAtRest, OldFormat
from coordinator.service import digest_audit
from coordinator.service.node_server import serve
from coordinator.api.metadata import bearer
from coordinator.transport.auth import (INSECURE_WARNING, PLAINTEXT_SECRETS_WARNING, AuthConfigError, Authorizer,
                                        AuthSettings, authorizer_for, node_token)
from coordinator.transport import tls as tls_files
from coordinator.transport.server import ServerLimits
from coordinator.transport.tls import ContextReloader, ServerTLS, TLSMaterialError

log = logging.getLogger("raftpoint.node")
PROG = "raftpoint coordinator"
# How long a thread may hold the interpreter while another waits for it (CPython's
# default is 5 ms). The Raft thread releases it at every socket call and fsync and then
# waits to get it back from the busy event loop: at 5 ms a tick of a few such calls ran
# hundreds of ms late under client load, near the election timeout.
SWITCH_INTERVAL_S = 0.001


def open_node(cfg: NodeConfig, raft_bind_address: str | None = None) -> CoordinatorNode:
    options = {} if cfg.store == "memory" else {"map_size": cfg.map_size_mb << 20,
                                                "max_map_size": cfg.max_map_size_mb << 20,
                                                "verify_at_open": True, "on_damage": _stop_damaged}
    store = open_store(cfg.store, Path(cfg.data_dir) / STORE_DIR, **options)
    return CoordinatorNode(cfg, store, on_apply=metrics.APPLY_SECONDS.observe,
                           on_journal_flush=metrics.JOURNAL_FSYNC_SECONDS.observe, raft_bind_address=raft_bind_address)


def _stop_damaged(message: str) -> None:
    """A record failed its checksum: stop rather than serve or replicate without it."""
    fail_stop(message, EXIT_DAMAGED)


def _stop_diverged(found: digest_audit.Verdict) -> None:
    metrics.DIGEST_DIVERGED.set(1)
    fail_stop(f"{found.message}. {REBUILD_FROM_PEERS}" if found.rebuild else f"{found.message}.", EXIT_DAMAGED)


def authorizer_of(cfg: NodeConfig) -> Authorizer | None:
    """The node's authorizer (None: auth off, announced loudly); raises AuthConfigError
    for settings that would leave the node open or that cannot be read."""
    tls = ServerTLS.of(cfg)
    authorizer = authorizer_for(AuthSettings(bindings_file=cfg.auth_bindings_file, tokens_file=cfg.auth_tokens_file,
                                             tls=tls is not None,
                                             # grpcio shows a client certificate only when it requires one
                                             client_certs=tls is not None and tls.client_auth == "require",
                                             node_token=node_token(cfg.password())))
    if authorizer is None:
        _warn(INSECURE_WARNING)
    elif tls is None:  # without TLS, tokens are the only identity source
        _warn(PLAINTEXT_SECRETS_WARNING)
    return authorizer


def _warn(text: str) -> None:
    """A warning an operator must not miss: in the log and on stderr, before the node starts."""
    log.warning(text)
    print(f"{PROG}: WARNING: {text}", file=sys.stderr)


async def _main(cfg: NodeConfig, authorizer: Authorizer | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Before anything is opened: a second node on this data dir or on these ports is
    # refused with the reason, and leaves the first one's state untouched.
    tls = ServerTLS.of(cfg)  # its files were checked by run()
    with DataDirLock(cfg.data_dir):
        # The listeners bind the addresses resolved here: a name that stops resolving
        # later (DNS settling) cannot fail a bind.
        bound = ports.check_all({"Raft": cfg.raft_address, "gRPC": cfg.grpc_address, "metrics": cfg.metrics_address,
                                 **({"probe": cfg.probe_address} if cfg.probe_address else {})})
        node = open_node(cfg, raft_bind_address=bound["Raft"])
        report = HealthReport()
        try:
            start_metrics(cfg, tls, report, bound["metrics"])
            if cfg.probe_address:
                metrics_server.start_probe_server(bound["probe"], report)
            gc_pauses.tune_for_serving()  # the node's long-lived objects exist now
            metrics.GC_PAUSE.set_function(gc_pauses.worst_recent_pause)
            log.info("node started raft=%s grpc=%s metrics=%s tls=%s", cfg.raft_address, cfg.grpc_address,
                     cfg.metrics_address, "off (--insecure)" if tls is None else f"on, client auth {tls.client_auth}")
            peers = [p.grpc for p in cfg.peer_list()]
            peer_tls = ClientTLS.plaintext() if tls is None else tls.peer_client()
            peer_credentials = bearer(node_token(cfg.password()))
            audit = asyncio.create_task(digest_audit.run(node, cfg.raft_address, peers, cfg.digest_audit_s, stop,
                                                         _stop_diverged, peer_tls, peer_credentials,
                                                         node.replaced_applied_from)
                                        ) if cfg.digest_audit_s and peers else None
            await serve(node, bound["gRPC"], stop, cfg.dedupe_window_s,
                        ServerLimits(max_connections=cfg.max_connections,
                                     unauthenticated_per_source=cfg.max_unauthenticated_per_source,
                                     max_rpcs=cfg.max_rpcs, ping_s=cfg.session_ping_s,
                                     ping_timeout_s=cfg.session_ping_timeout_s),
                        authorizer=authorizer, tls=tls, known_hosts=cfg.known_hosts(), report=report)
            if audit is not None:
                await audit
        finally:
            node.close()
            log.info("node stopped")


# File descriptors a client connection costs behind the connection front (the
# client's, the relay's to gRPC, gRPC's own), and what the node needs besides.
FDS_PER_CONNECTION = 3
FDS_BESIDES_CONNECTIONS = 1024


def raise_fd_limit(max_connections: int) -> None:
    """Raise the soft limit on open files to the hard one, as servers do: a flood of
    connections must meet the node's own caps, not EMFILE (which stops every accept,
    the Raft port's too). Warns when even the hard limit is short of the caps."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %s to %s: %s", soft, hard, exc)
    needed = FDS_PER_CONNECTION * max_connections + FDS_BESIDES_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning("the open-file limit %s is below the %s that max_connections=%s needs: raise it (ulimit -n) "
                    "or lower max_connections", soft, needed, max_connections)


def start_metrics(cfg: NodeConfig, tls: ServerTLS | None, report: HealthReport | None = None,
                  address: str | None = None) -> metrics_server.MetricsServer:
    """/metrics (and the probe paths) over HTTPS with the node's certificate when the
    node has TLS, unless plain HTTP was asked for (`metrics_plaintext`). `address`: the
    resolved form of cfg.metrics_address to bind, if there is one."""
    address = address or cfg.metrics_address
    if tls is None or cfg.metrics_plaintext:
        if tls is not None:
            log.warning("metrics are served over plain HTTP (metrics_plaintext) while gRPC uses TLS")
        return metrics_server.start_metrics_server(address, report=report)
    context = ContextReloader(tls, lambda t: metrics_server.tls_context(
        t.cert_file, t.key_file, t.client_ca_file or None, client_auth_required=t.client_auth == "require"))
    return metrics_server.start_metrics_server(address, context, report=report)


def run(args: argparse.Namespace) -> int:
    """Run the node the parsed flags describe; the exit code says how it ended."""
    try:
        cfg = config.from_args(args)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.log_level)
    tracing.configure_from_env()  # before the server and its interceptors are made
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    raise_fd_limit(cfg.max_connections)
    try:
        tls = ServerTLS.of(cfg)
        if tls is not None:
            tls_files.load(tls)  # a bad file stops the node here, before anything is opened
    except TLSMaterialError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    try:
        authorizer = authorizer_of(cfg)
    except AuthConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_main(cfg, authorizer))
    except DamagedAtRest as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_DAMAGED
    except (OSError, JournalFormatError, OldFormat, UnsupportedPysyncobj, TLSMaterialError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="run one coordinator node")
    config.add_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return run(build_parser().parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
