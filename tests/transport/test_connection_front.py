"""Idle connections from a few hosts do not lock new clients out of a node, and a node
full for new clients says so to its readiness probe.

Strangers connect from other loopback addresses (127.0.0.2 and up, all of 127/8 is
this host), the well-behaved client from 127.0.0.1."""
from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from asyncio import selector_events
from typing import AsyncIterator

import pytest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.harness.in_process import LocalReplica
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server
from coordinator.transport.server import ServerLimits
from tests.support.connections import PLAIN, status_on_a_new_connection

# 32 slots, 8 of them kept for known addresses; 4 unauthenticated connections per
# address. The handshake allowance outlasts each test: the strangers' silent
# connections stay held, as a flood that reopens them keeps them.
LIMITS = ServerLimits(max_connections=32, unauthenticated_per_source=4, handshake_s=60.0)


@contextlib.asynccontextmanager
async def node() -> AsyncIterator[str]:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(node_server.serve(LocalReplica(address), address, stop, limits=LIMITS))
    try:
        deadline = time.monotonic() + 10
        while await asyncio.to_thread(node_status, address, 1.0, PLAIN) is None:
            assert time.monotonic() < deadline and not serving.done(), "the node never answered"
            await asyncio.sleep(0.05)
        yield address
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


def _flood(address: str, source: str, count: int, settle_s: float = 10.0) -> list[socket.socket]:
    """`count` silent connections from `source`; returns those the node kept open. The
    node resets a refused one at once and sends its HTTP/2 settings on one it keeps;
    a connection it has said neither on within `settle_s` is counted as kept."""
    host, port = address.rsplit(":", 1)
    undecided = {socket.create_connection((host, int(port)), source_address=(source, 0)) for _ in range(count)}
    kept = []
    deadline = time.monotonic() + settle_s
    while undecided and time.monotonic() < deadline:
        readable, _, _ = select.select(list(undecided), [], [], 0.1)
        for s in readable:
            undecided.discard(s)
            try:
                if s.recv(1, socket.MSG_PEEK) != b"":
                    kept.append(s)
                    continue
            except ConnectionResetError:
                pass
            s.close()
    return kept + list(undecided)


def _readiness(address: str, n: int) -> str:
    with PLAIN.channel(address, options=[("raftpoint.test.connection", n)]) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        except grpc.RpcError as exc:
            return exc.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


async def test_idle_connections_from_one_host_leave_room_for_other_clients() -> None:
    async with node() as address:
        held = await asyncio.to_thread(_flood, address, "127.0.0.2", 4 * LIMITS.max_connections)
        try:
            assert len(held) <= LIMITS.unauthenticated_per_source, f"one host holds {len(held)} silent connections"
            answers = [await asyncio.to_thread(status_on_a_new_connection, address, n) for n in range(3)]
            assert answers == ["OK"] * 3, f"a new client's calls with the flood held: {answers}"
        finally:
            for s in held:
                s.close()


async def test_a_node_full_for_new_clients_fails_readiness_and_keeps_room_for_known_ones() -> None:
    async with node() as address:
        held: list[socket.socket] = []
        try:
            # Strangers from 7 addresses take what is open to them (32 - 8 reserved).
            for i in range(2, 9):
                held += await asyncio.to_thread(_flood, address, f"127.0.0.{i}", LIMITS.unauthenticated_per_source)
            assert len(held) == 24, f"the strangers hold {len(held)} connections, not the 24 open to them"
            late = await asyncio.to_thread(_flood, address, "127.0.0.9", 1)
            assert late == [], "a stranger got a slot kept for known addresses"
            # Loopback is this host, always known: the probe gets in and hears the truth.
            deadline = time.monotonic() + 10
            n = 0
            while (status := await asyncio.to_thread(_readiness, address, n)) != "NOT_SERVING":
                assert time.monotonic() < deadline, f"readiness still {status} while new clients are refused"
                n += 1
                await asyncio.sleep(0.1)
            assert await asyncio.to_thread(status_on_a_new_connection, address, n + 1) == "OK"
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 10
        while (status := await asyncio.to_thread(_readiness, address, n)) != "SERVING":
            assert time.monotonic() < deadline, f"readiness {status} after the strangers left"
            n += 1
            await asyncio.sleep(0.1)


async def test_what_a_client_sends_before_its_relay_is_connected_reaches_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The front pauses reading a new client until its relay is connected; CPython
    3.11.2 starts reading all the same (as this patch makes the running Python do)."""
    def add_reader_even_if_paused(self: selector_events._SelectorTransport, fd: int, callback: object,
                                  *args: object) -> None:
        if not self._closing:
            self._loop._add_reader(fd, callback, *args)
    monkeypatch.setattr(selector_events._SelectorTransport, "_add_reader", add_reader_even_if_paused)
    async with node() as address:
        statuses = [await asyncio.to_thread(status_on_a_new_connection, address, n) for n in range(10)]
    assert statuses == ["OK"] * 10, statuses
