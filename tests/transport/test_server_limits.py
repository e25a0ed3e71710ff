"""A flood of idle connections takes a bounded share of a node, and only for a bounded time."""
from __future__ import annotations

import asyncio
import socket
import time

from coordinator.harness.in_process import LocalReplica
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server
from coordinator.transport.server import ServerLimits
from tests.support.connections import PLAIN, status_on_a_new_connection

# The handshake timeout is long enough that the silent connections are still held
# while the test probes (a loaded machine takes a while to accept them), short enough
# to wait out.
LIMITS = ServerLimits(max_connections=2, idle_s=60.0, handshake_s=12.0)


def _held(s: socket.socket, timeout_s: float) -> bool:
    """Whether the server kept `s`: it sends its HTTP/2 settings on a connection it
    accepted, and closes one beyond its cap at once."""
    s.settimeout(timeout_s)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except (ConnectionResetError, TimeoutError):  # a server too slow to say: try another
        return False


def _read_until_closed(s: socket.socket, timeout_s: float) -> None:
    """Returns once the server has closed `s` (it may first send its own HTTP/2
    settings); raises socket.timeout if it is still open after `timeout_s`."""
    s.settimeout(timeout_s)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass


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
        # Connect and say nothing, as a flood of idle clients does. The readiness probe's
        # own connection may still count for a moment after it closed, so a silent one
        # the server turned away is opened again.
        first_held = None
        while len(idle) < LIMITS.max_connections:
            assert time.monotonic() < deadline, "the server never held the silent connections"
            s = socket.create_connection((host, int(port)))
            if await asyncio.to_thread(_held, s, 2.0):
                first_held = first_held or time.monotonic()
                idle.append(s)
            else:
                s.close()
        assert first_held is not None
        held_until = first_held + LIMITS.handshake_s / 2  # the first one is closed at handshake_s
        # While the silent ones are held, a new connection is refused.
        answers: list[str] = []
        n = 1
        while (answer := await asyncio.to_thread(status_on_a_new_connection, address, n)) != "UNAVAILABLE":
            answers.append(answer)
            assert time.monotonic() < held_until, f"a new connection was still let in with the cap full: {answers}"
            n += 1
            await asyncio.sleep(0.05)
        # The silent connections are closed by the server after the handshake timeout ...
        for s in idle:
            await asyncio.to_thread(_read_until_closed, s, 10 * LIMITS.handshake_s)
        # ... and an honest client gets in.
        deadline = time.monotonic() + 10 * LIMITS.handshake_s
        while (answer := await asyncio.to_thread(status_on_a_new_connection, address, n)) != "OK":
            assert time.monotonic() < deadline, f"still {answer} after the idle connections were closed"
            n += 1
            await asyncio.sleep(0.1)
    finally:
        for s in idle:
            s.close()
        stop.set()
        await asyncio.wait_for(serving, 10)
