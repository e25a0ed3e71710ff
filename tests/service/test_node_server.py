"""A node's serving half starts the gRPC server with the leader loop and stops both."""
from __future__ import annotations

import asyncio
import socket

import pytest

from coordinator.harness.in_process import LocalReplica
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server


async def test_it_serves_until_stopped() -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(node_server.serve(LocalReplica(address), address, stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while await asyncio.to_thread(node_status, address) is None:
        assert loop.time() < deadline and not serving.done(), "the server never answered"
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(serving, 10)
    assert await asyncio.to_thread(node_status, address) is None


async def test_an_address_in_use_is_an_error_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        with pytest.raises(OSError, match="cannot bind"):
            await asyncio.wait_for(node_server.serve(LocalReplica(address), address, asyncio.Event()), 10)
