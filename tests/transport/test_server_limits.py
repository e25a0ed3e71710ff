"""A flood of idle connections takes a bounded share of a node, and only for a bounded time."""
from __future__ import annotations

import asyncio
import socket
import time

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.in_process import LocalReplica
from coordinator.channels import ClientTLS
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server
from coordinator.transport.server import ServerLimits

LIMITS = ServerLimits(max_connections=2, idle_s=1.0, handshake_s=1.0)

# serve() is given no TLS settings here: these tests are about the server's limits and
# lifecycle, so they speak plaintext to it (the node's TLS has its own tests).
PLAIN = ClientTLS.plaintext()



def _status_on_a_new_connection(address: str, n: int) -> str:
    # Distinct channel arguments: a new connection, not one shared with earlier channels.
    with PLAIN.channel(address, options=[("raftpoint.test.connection", n)]) as channel:
        try:
            pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=1)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name


async def test_idle_connections_beyond_the_cap_are_refused_then_dropped() -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(node_server.serve(LocalReplica(address), address, stop, limits=LIMITS))
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 10
        while await asyncio.to_thread(node_status, address, 1.0, PLAIN) is None:
            assert time.monotonic() < deadline and not serving.done(), "the server never answered"
            await asyncio.sleep(0.05)
        host, port = address.rsplit(":", 1)
        for _ in range(LIMITS.max_connections):  # connect and say nothing, as a flood of idle clients does
            idle.append(socket.create_connection((host, int(port))))
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(_status_on_a_new_connection, address, 1) == "UNAVAILABLE"
        # The silent connections are closed after the handshake timeout; an honest client gets in.
        deadline = time.monotonic() + 10 * LIMITS.handshake_s
        n = 2
        while (answer := await asyncio.to_thread(_status_on_a_new_connection, address, n)) != "OK":
            assert time.monotonic() < deadline, f"still {answer} after the idle connections' timeout"
            n += 1
            await asyncio.sleep(0.1)
    finally:
        for s in idle:
            s.close()
        stop.set()
        await asyncio.wait_for(serving, 10)
