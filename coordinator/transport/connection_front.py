"""The node's gRPC port: a front that caps connections per source address and relays
each one it keeps to the gRPC server, which listens on loopback only.

Why a front. gRPC caps a server's connections only as a whole
(`grpc.max_allowed_incoming_connections`), and a raw TCP connection that never
starts its handshake holds a slot until the handshake allowance closes it: one host
reopening about 200 connections a second held all 2,048 slots of a leader, which
went on leading while no new client could reach it. Per-address caps are not in
gRPC, and grpcio offers no hook between accept and handshake (nor a way to hand it
an accepted socket), so the only place to count connections by address inside the
node is a listener of its own in front of gRPC. Weighed against it:

- a larger file-descriptor limit (the node raises its soft limit to the hard one at
  start anyway) or a larger gRPC cap only moves the number one host must reach;
- a kernel cap (iptables/nftables `connlimit`) counts per address without a hop, but
  lives outside the node: it is not there on a laptop or in a plain container, and
  it cannot tell a stranger from an agent that has authenticated, nor fail the
  node's readiness. It remains a good outer layer where the platform offers it.

The front is core.connection_caps applied at accept time: a connection over its
address's share, or beyond the slots its address may take, is reset at once and
counted (`raftpoint_grpc_connections_refused_total{reason}`, one log line per
interval); the others are relayed byte for byte, TLS included (the gRPC server does
the handshake and sees the client's certificate, as before). Its own event loop on
its own thread keeps accepting and refusing while the node's servicer loop is busy.
The relay costs a loopback hop per message (measured in docs/operating.md), and 3 file
descriptors per client connection instead of 1. The gRPC server's own port is on
loopback: only this host reaches it past the front. `proven(peer)` marks a relayed
connection as having made an authenticated call: the gRPC server sees the front's
loopback port as the peer, which names the relay.

A node is "refusing accepts" while the slots open to unknown addresses are all
taken; transport.server reports it NOT_SERVING for readiness then, so load
balancers send new clients to other nodes.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Iterable

import structlog

from coordinator.core.connection_caps import PER_SOURCE, ConnectionCaps, ConnectionLedger, source_of
from coordinator.observability import metrics
from coordinator.observability.log_tally import LogTally

log = structlog.get_logger("raftpoint.connections")
BACKLOG = 4096
# How often the known addresses (peers', the node's own) are resolved again: a peer's
# address follows its name (a rescheduled pod has a new one).
RESOLVE_PERIOD_S = 60.0
# This host's own loopback addresses, as sources (probes and tools run on the node's host).
LOOPBACK = frozenset(source_of(a) for a in ("127.0.0.1", "::1"))
_START_TIMEOUT_S = 10.0
# What a client may send before its relay to the gRPC server is connected (a loopback
# connect away): a TLS ClientHello is a few KiB.
EARLY_BYTES_MAX = 64 * 1024


def _bind(address: str) -> socket.socket:
    """A listening socket on "host:port" (the first address the host resolves to, as
    service.ports checks it); raises OSError naming the address."""
    host, _, port = address.rpartition(":")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host.strip("[]"), int(port),
                                                              type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot bind gRPC address {address}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind gRPC address {address} (in use, or not an address of this host): "
                      f"{exc.strerror}") from None
    return sock


class _Relay(asyncio.Protocol):
    """One side of a relayed connection; `other` is the other side. Each side pauses
    the other's reading while its own writes are backed up."""

    def __init__(self, front: "ConnectionFront") -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.other: _Relay | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)

    def eof_received(self) -> bool:
        return False  # close this side; connection_lost closes the other

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()  # flushes what is buffered for it first


class _Client(_Relay):
    """The side a client connected to.

    Reading is paused until the gRPC server side is connected, but some Pythons read
    anyway: CPython 3.11.2 (Debian 12's python3) starts reading after connection_made
    even when it paused reading there. What arrives before the relay is connected
    (a TLS ClientHello) is kept and sent on once it is, never dropped: a dropped
    ClientHello left the handshake to time out."""

    source = ""
    proven = False
    kept = False
    backend_port: int | None = None
    early: bytearray | None = None

    def data_received(self, data: bytes) -> None:
        if self.other is not None:
            super().data_received(data)
            return
        self.early = (self.early or bytearray()) + data
        if len(self.early) > EARLY_BYTES_MAX and self.transport is not None:
            self.transport.abort()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.source = source_of(peer[0] if peer else "")
        if not self.front.admit(self):
            transport.abort()
            return
        self.kept = True
        transport.pause_reading()  # until the gRPC server side is connected
        self.front.loop.create_task(self.front.connect_backend(self))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.kept:
            self.front.closed(self)


class ConnectionFront:
    """Listens on `address`, relays to the gRPC server at the address `start` is given
    (on loopback).

    `known_hosts`: names or addresses always let into the reserved slots (the node's
    peers and its own address; loopback always is)."""

    def __init__(self, address: str, caps: ConnectionCaps, known_hosts: Iterable[str] = ()) -> None:
        self.address, self.caps = address, caps
        self.backend = ""
        self.known_hosts = tuple(h for h in known_hosts if h)
        self.ledger = ConnectionLedger(caps)
        self.ledger.always_know(LOOPBACK)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="raftpoint-grpc-front", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._by_backend_port: dict[int, _Client] = {}
        self._clients: set[_Client] = set()
        self._refusals = LogTally(log.warning, "grpc.connections_refused")
        self._counts = {state: metrics.GRPC_CONNECTIONS.labels(state) for state in metrics.CONNECTION_STATES}
        self._refused = {reason: metrics.GRPC_CONNECTIONS_REFUSED.labels(reason)
                         for reason in metrics.CONNECTION_REFUSALS}
        self._tasks: list[asyncio.Task] = []

    # ---- the caller's thread ------------------------------------------------------
    def start(self, backend: str) -> None:
        """Listen and relay to `backend` ("127.0.0.1:PORT"); raises OSError when the
        front's address cannot be bound."""
        self.backend = backend
        sock = _bind(self.address)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(sock), self.loop).result(_START_TIMEOUT_S)
        except BaseException:
            sock.close()
            self.close()
            raise

    def close(self) -> None:
        """Stop accepting and close every relayed connection (blocking, quick)."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(_START_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_START_TIMEOUT_S)
            if not self._thread.is_alive():
                self.loop.close()

    def refusing(self) -> bool:
        """Whether a client from an address the node does not know is refused now."""
        return self.ledger.refusing_strangers()

    def proven(self, peer: str) -> None:
        """The gRPC server's peer string ("ipv4:127.0.0.1:PORT") of a connection that
        made an authenticated call; called on the servicers' loop, once per connection
        in the common case (a look-up and a flag)."""
        port = peer.rpartition(":")[2]
        client = self._by_backend_port.get(int(port)) if port.isdigit() else None
        if client is not None and not client.proven:
            self.loop.call_soon_threadsafe(self._prove, client)

    # ---- the front's thread -------------------------------------------------------
    async def _start(self, sock: socket.socket) -> None:
        self._server = await self.loop.create_server(lambda: _Client(self), sock=sock, backlog=BACKLOG)
        await self._resolve_known()
        self._tasks.append(self.loop.create_task(self._upkeep()))

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
        for client in list(self._clients):
            if client.transport is not None:
                client.transport.abort()
            if client.other is not None and client.other.transport is not None:
                client.other.transport.abort()

    def admit(self, client: _Client) -> bool:
        reason = self.ledger.refusal(client.source, time.monotonic())
        if reason is not None:
            self._refused[reason].inc()
            self._refusals.note(reason, f"refused a connection from {client.source} ({self._why(reason, client)})")
            return False
        self.ledger.opened(client.source)
        self._clients.add(client)
        self._counts["unauthenticated"].inc()
        return True

    def _why(self, reason: str, client: _Client) -> str:
        if reason == PER_SOURCE:
            return (f"it holds {self.ledger.unproven(client.source)} connections that have not authenticated, "
                    f"the most one address may")
        return f"{self.ledger.total} of {self.caps.max_connections} connections open"

    async def connect_backend(self, client: _Client) -> None:
        host, _, port = self.backend.rpartition(":")
        backend = _Relay(self)
        try:
            await self.loop.create_connection(lambda: backend, host.strip("[]"), int(port))
        except OSError as exc:
            log.warning("grpc.relay_failed", backend=self.backend, error=str(exc))
            if client.transport is not None:
                client.transport.abort()
            return
        assert backend.transport is not None
        if client.transport is None or client.transport.is_closing():
            backend.transport.close()
            return
        client.other, backend.other = backend, client
        if client.early:
            backend.transport.write(bytes(client.early))
            client.early = None
        client.backend_port = backend.transport.get_extra_info("sockname")[1]
        self._by_backend_port[client.backend_port] = client
        client.transport.resume_reading()

    def _prove(self, client: _Client) -> None:
        if client.proven or client not in self._clients:
            return
        client.proven = True
        self.ledger.proven(client.source, time.monotonic())
        self._counts["unauthenticated"].dec()
        self._counts["authenticated"].inc()

    def closed(self, client: _Client) -> None:
        if client not in self._clients:
            return
        self._clients.discard(client)
        if client.backend_port is not None:
            self._by_backend_port.pop(client.backend_port, None)
        self.ledger.closed(client.source, client.proven)
        self._counts["authenticated" if client.proven else "unauthenticated"].dec()

    async def _upkeep(self) -> None:
        resolved_at = time.monotonic()
        while True:
            await asyncio.sleep(self._refusals.interval_s)
            self._refusals.flush()
            now = time.monotonic()
            self.ledger.forget_expired(now)
            if now - resolved_at >= RESOLVE_PERIOD_S:
                await self._resolve_known()
                resolved_at = now

    async def _resolve_known(self) -> None:
        addresses = set(LOOPBACK)  # already sources
        for host in self.known_hosts:
            try:
                infos = await self.loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except OSError as exc:  # a peer not resolvable now (not scheduled yet): known once it is
                log.debug("grpc.known_host_unresolved", host=host, error=str(exc))
                continue
            addresses.update(source_of(str(info[4][0])) for info in infos)
        self.ledger.always_know(addresses)
