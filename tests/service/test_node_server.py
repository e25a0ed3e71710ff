"""A node's serving half starts the gRPC server with the leader loop and stops both."""
from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.harness.in_process import LocalReplica
from coordinator.channels import ClientTLS
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server
from coordinator.transport import server

# serve() is given no TLS settings here: these tests are about the server's limits and
# lifecycle, so they speak plaintext to it (the node's TLS has its own tests).
PLAIN = ClientTLS.plaintext()



async def test_it_serves_until_stopped() -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(node_server.serve(LocalReplica(address), address, stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while await asyncio.to_thread(node_status, address, 1.0, PLAIN) is None:
        assert loop.time() < deadline and not serving.done(), "the server never answered"
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(serving, 10)
    assert await asyncio.to_thread(node_status, address, 1.0, PLAIN) is None


async def test_an_address_in_use_is_an_error_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        with pytest.raises(OSError, match="cannot bind"):
            await asyncio.wait_for(node_server.serve(LocalReplica(address), address, asyncio.Event()), 10)


class NoStore(LocalReplica):
    """A replica whose store cannot be read, as a node left without a usable one."""

    def read_state(self):  # type: ignore[no-untyped-def]
        raise OSError("the store is gone")


@pytest.mark.parametrize("replica_class, liveness", [(LocalReplica, "SERVING"), (NoStore, "NOT_SERVING")])
async def test_the_liveness_service_reports_whether_the_store_can_be_read(replica_class: type,
                                                                         liveness: str) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(node_server.serve(replica_class(address), address, stop))

    def check() -> str | None:
        with PLAIN.channel(address) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=server.LIVENESS_SERVICE), timeout=1)
            except grpc.RpcError:
                return None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (status := await asyncio.to_thread(check)) is None:
            assert loop.time() < deadline and not serving.done(), "the server never answered"
            await asyncio.sleep(0.05)
        assert status == liveness
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)
