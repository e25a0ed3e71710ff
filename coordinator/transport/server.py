"""The node's gRPC server: services, health, reflection."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import AsyncIterator, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator import tracing
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.config import NodeConfig
from coordinator.core.connection_caps import ConnectionCaps
from coordinator.observability import metrics
from coordinator.observability.health_report import HealthReport, Verdict
from coordinator.replication.batcher import Batcher
from coordinator.replication.replica import Replica
from coordinator.transport.admission import Admission
from coordinator.transport.heavy_reads import HeavyReads
from coordinator.transport.auth import Authorizer
from coordinator.transport.connection_front import ConnectionFront
from coordinator.transport.interceptors import RequestInterceptor
from coordinator.transport.leases import Leases
from coordinator.transport.membership import JOINING_SERVICE
from coordinator.transport.order_wakeups import OrderWakeups
from coordinator.transport.proposer import Proposer
from coordinator.transport.servicers import AdminServicer, AgentServicer
from coordinator.transport.tls import ServerTLS

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
HEALTH_PERIOD_S = 0.5
SERVICES = ("raftpoint.v1.AgentService", "raftpoint.v1.AdminService", "")
# For the liveness probe: SERVING while the node can read its store, whether or not
# it knows a leader (restarting nodes for a lost quorum would only make it worse).
LIVENESS_SERVICE = "raftpoint.liveness"
FIRST_RAFT_INDEX = 1  # the entry every fresh pysyncobj log starts with
# Behind the connection front, the gRPC server listens here only (any free port).
BACKEND_HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerLimits:
    """What one client population may hold of a node's gRPC server.

    About 20,000 idle TCP connections left a leader unable to accept clients while
    it stayed leader, and a cap of `max_connections` alone only moved the number: one
    host held all 2,048 slots. No address may hold more than
    `unauthenticated_per_source` connections that have made no authenticated call,
    a quarter of the slots stay for the node's peers and the addresses that
    authenticated recently, and beyond `max_connections` new connections are reset
    at once (clients go to another node, or retry): core.connection_caps, applied by
    transport.connection_front. `unauthenticated_per_source` 0 leaves the gRPC server
    on the port itself with only the node-wide cap (where a proxy or the kernel caps
    per address). A connection that has not finished its TLS and HTTP/2 handshake
    within `handshake_s` (a few round trips, done by gRPC's own threads), or is idle
    for `idle_s`, is closed, so the slots come back; one connection carries at most `max_streams_per_connection` calls, and
    the node at most `max_rpcs` (beyond: RESOURCE_EXHAUSTED). Each agent holds one
    long-lived Session (or WatchOrders) stream, which is what `max_rpcs` must leave room for.
    The per-connection limit sits far above what one client keeps in flight: a stream's
    slot frees only once the node has finished with it, after the client already has its
    answer, so a client keeping N calls in flight against a limit of N has its next
    stream refused (REFUSED_STREAM, UNAVAILABLE to the caller). `max_rpcs` and admission
    bound the node's work; this limit only bounds one connection's share of it.
    Before any of these is reached, `transport.admission` sheds calls by the node's
    measured lag and the work in flight (core.overload.AdmissionLimits).

    Every `ping_s` the node sends an HTTP/2 ping on each connection and closes one whose
    client has not answered within `ping_timeout_s`. The client's gRPC answers in its own
    I/O, without a frame or any of the agent's code, so this costs the node no Python
    work; it is what proves an agent's session alive, the session holding the agent's
    lease (agent_session.py). An agent whose host vanishes without closing its
    connection is thus declared failed at most ping_s + ping_timeout_s + its lease TTL
    after it vanished; one whose process dies (the kernel closes the connection) a TTL
    after. That needs the agent's own gRPC at the other end: a proxy that answers pings
    itself hides a vanished agent until its keepalives stop proving it
    (core.decisions.HOLD_PROOF_TTLS)."""

    max_connections: int = NodeConfig.max_connections
    unauthenticated_per_source: int = NodeConfig.max_unauthenticated_per_source
    max_streams_per_connection: int = 4096
    max_rpcs: int = NodeConfig.max_rpcs
    idle_s: float = 300.0
    handshake_s: float = 5.0
    ping_s: float = NodeConfig.session_ping_s
    ping_timeout_s: float = NodeConfig.session_ping_timeout_s


def readiness(node: Replica, front: ConnectionFront | None = None) -> Verdict:
    """Ready only when a leader is known, this node has applied what is committed,
    and it takes new clients (`front` refuses none for a full node)."""
    s = node.status()
    if not s.leader:
        return Verdict(False, "no leader known")
    if s.raft_applied_index < s.commit_index:
        return Verdict(False, "catching up: committed entries not applied yet")
    if front is not None and front.refusing():
        return Verdict(False, "refusing new connections: the connection slots are full")
    return Verdict(True, "ready")


def waiting_to_join(node: Replica) -> bool:
    """Whether the node waits to be added to a cluster: it knows no leader and has
    committed nothing past Raft's initial entry (index 1; a node that has been a
    member has committed at least its first leader's no-op). AddNode asks for this
    before proposing the node (transport/membership.py)."""
    s = node.status()
    return not s.leader and s.commit_index <= FIRST_RAFT_INDEX


def usable(node: Replica) -> bool:
    """Whether the node can read its state: a node stuck without a usable store answers
    TCP but nothing else, and only a restart (which checks the store) gets it out."""
    try:
        node.read_state().dedupe_clock()  # one point read: it goes to the store as a scan would, at no cost per group
        node.status()
    except Exception:
        log.error("the node cannot read its state; reporting %s NOT_SERVING", LIVENESS_SERVICE, exc_info=True)
        return False
    return True


def _status(ok: bool) -> int:
    return health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING


async def _health_loop(node: Replica, servicer: health.aio.HealthServicer, stop: asyncio.Event,
                       front: ConnectionFront | None, report: HealthReport | None) -> None:
    while not stop.is_set():
        ready, live = readiness(node, front), usable(node)
        for name in SERVICES:
            await servicer.set(name, _status(ready.ok))
        await servicer.set(LIVENESS_SERVICE, _status(live))
        await servicer.set(JOINING_SERVICE, _status(waiting_to_join(node)))
        if report is not None:
            report.publish(ready, Verdict(True, "live") if live else Verdict(False, "the node cannot read its state"))
        metrics.update_node_gauges(node.status())
        try:
            await asyncio.wait_for(stop.wait(), HEALTH_PERIOD_S)
        except TimeoutError:
            pass


def gate_for(batcher: Batcher) -> Admission:
    """The admission gate over a batcher's proposals and its replica's Raft tick."""
    return Admission(proposals_waiting=lambda: batcher.waiting, tick_lag_since=batcher.replica.tick_lag_since,
                     leads=batcher.replica.is_leader)


@contextlib.asynccontextmanager
async def running(batcher: Batcher, leases: Leases, address: str,
                  limits: ServerLimits = ServerLimits(), admission: Admission | None = None,
                  authorizer: Authorizer | None = None, tls: ServerTLS | None = None,
                  known_hosts: Iterable[str] = (), report: HealthReport | None = None) -> AsyncIterator[None]:
    """The gRPC server (and its health reports, and the admission gate's lag
    measurement) on `address` while the block runs; TLS with `tls` (re-read when its
    files change), plaintext only when it is None.

    `authorizer`: who may call what (transport.auth); None only in the insecure
    development mode, where every caller may do anything. `known_hosts`: the node's
    peers and its own host, whose connections the reserved slots are kept for.
    `report`: where the HTTP probes read the readiness and liveness decided here.

    Raises OSError before the block when the address cannot be bound, TLSMaterialError
    when the TLS files do not check out.
    """
    node = batcher.replica
    admission = admission or gate_for(batcher)
    front = None
    if limits.unauthenticated_per_source:
        front = ConnectionFront(address, ConnectionCaps.of(limits.max_connections, limits.unauthenticated_per_source),
                                known_hosts)
    # The trace's span first: it covers admission and authorization too.
    interceptors = [*tracing.server_interceptors(),
                    RequestInterceptor(admission, authorizer, front.proven if front is not None else None)]
    server = grpc.aio.server(interceptors=interceptors, maximum_concurrent_rpcs=limits.max_rpcs, options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        # gRPC sets SO_REUSEPORT by default: a second server on this port would share
        # it, and the kernel would split the clients between the two.
        ("grpc.so_reuseport", 0),
        # Behind the front this is a backstop for local callers: the front keeps at most
        # max_connections, and gRPC counts a closed connection for a moment after.
        ("grpc.max_allowed_incoming_connections", limits.max_connections * (2 if front is not None else 1)),
        ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
        ("grpc.max_connection_idle_ms", int(limits.idle_s * 1000)),
        ("grpc.server_handshake_timeout_ms", int(limits.handshake_s * 1000)),
        ("grpc.keepalive_time_ms", int(limits.ping_s * 1000)),
        # Both: gRPC core waits ping_timeout_ms for a keepalive ping's answer (without it,
        # an unanswered ping was never timed out), and keepalive_timeout_ms for older cores.
        ("grpc.keepalive_timeout_ms", int(limits.ping_timeout_s * 1000)),
        ("grpc.http2.ping_timeout_ms", int(limits.ping_timeout_s * 1000)),
        # An idle session carries no data for minutes; by default only 2 pings may go out
        # without data, after which the node could no longer tell a dead client from an idle one.
        ("grpc.http2.max_pings_without_data", 0),
    ])
    proposer = Proposer(batcher)
    wakeups = OrderWakeups(asyncio.get_running_loop())
    node.on_agent_changes(wakeups.signal)  # the applier wakes order streams; nothing polls
    pb_grpc.add_AgentServiceServicer_to_server(AgentServicer(proposer, leases, wakeups, admission), server)
    heavy = HeavyReads()
    pb_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(proposer, heavy, admission, tls.peer_client() if tls is not None else None), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [d.full_name for d in pb.DESCRIPTOR.services_by_name.values()]
    reflection.enable_server_reflection([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                         reflection.SERVICE_NAME], server)
    listen = address if front is None else f"{BACKEND_HOST}:0"
    try:
        port = server.add_insecure_port(listen) if tls is None else server.add_secure_port(listen, tls.credentials())
    except RuntimeError:  # newer grpc raises where older returned 0
        port = 0
    if port == 0:
        raise OSError(f"cannot bind gRPC address {listen} (in use, or not an address of this host)")
    await server.start()
    if front is not None:
        try:
            front.start(f"{BACKEND_HOST}:{port}")
        except OSError:
            await server.stop(grace=None)
            raise
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_health_loop(node, health_servicer, stop, front, report)),
             asyncio.create_task(admission.run(stop)),
             asyncio.create_task(wakeups.follow_leadership(lambda: node.is_leader(), stop))]
    try:
        yield
    finally:
        stop.set()
        node.on_agent_changes(None)
        await server.stop(grace=2)
        if front is not None:
            await asyncio.to_thread(front.close)
        await asyncio.gather(*tasks, return_exceptions=True)
        heavy.close()
