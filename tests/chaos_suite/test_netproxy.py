"""The link proxy on loopback: timing, one-way loss, partitions, heals, flaky resets, bounds."""
from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest

from chaos.linkfaults import DROP, LinkFaults, Partition, delay
from chaos.netproxy import NetProxy
from coordinator.harness.local_cluster import wait_for

pytestmark = pytest.mark.chaos


class Wire:
    """A target listener behind one proxy link, and helpers to open connections through it."""

    def __init__(self, proxy: NetProxy, name: str = "l") -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(5)
        self.proxy = proxy
        self.name = name
        self.address = proxy.add_link(name, f"127.0.0.1:{self.listener.getsockname()[1]}")
        self.sockets: list[socket.socket] = [self.listener]

    def connect(self) -> tuple[socket.socket, socket.socket]:
        """(client side, target side) of a fresh connection through the proxy."""
        host, port = self.address.rsplit(":", 1)
        client = socket.create_connection((host, int(port)), timeout=5)
        server, _ = self.listener.accept()
        server.settimeout(5)
        self.sockets += [client, server]
        return client, server

    def stats(self):
        return self.proxy.stats(self.name)

    def close(self) -> None:
        for s in self.sockets:
            s.close()


@pytest.fixture
def wire() -> Iterator[Wire]:
    with NetProxy(seed=1) as proxy:
        w = Wire(proxy)
        yield w
        w.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_by_proxy(sock: socket.socket) -> bool:
    """True once the proxy has closed or reset this connection."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_passes_bytes_both_ways_and_counts_them(wire: Wire) -> None:
    client, server = wire.connect()
    client.sendall(b"hello" * 1000)
    assert recv_exactly(server, 5000) == b"hello" * 1000
    server.sendall(b"back")
    assert recv_exactly(client, 4) == b"back"
    wait_for(lambda: wire.stats().forwarded_up == 5000 and wire.stats().forwarded_down == 4, "counters")
    assert wire.stats().accepted == 1 and wire.stats().open == 1 and wire.stats().reset == 0


def test_delay_is_applied_per_direction_within_tolerance(wire: Wire) -> None:
    client, server = wire.connect()
    wire.proxy.update("l", up=delay(200))
    ups, downs = [], []
    for _ in range(3):  # a loaded machine adds latency to a sample, never removes it: judge the best
        started = time.monotonic()
        client.sendall(b"x")
        assert recv_exactly(server, 1) == b"x"
        ups.append(time.monotonic() - started)
        started = time.monotonic()
        server.sendall(b"y")
        assert recv_exactly(client, 1) == b"y"
        downs.append(time.monotonic() - started)
    assert min(ups) >= 0.19 and min(ups) < 0.5, ups
    assert min(downs) < 0.15, downs


def test_jitter_never_reorders_bytes(wire: Wire) -> None:
    client, server = wire.connect()
    wire.proxy.update("l", up=delay(20, jitter_ms=20))
    payload = b"".join(i.to_bytes(4, "big") for i in range(300))
    for i in range(0, len(payload), 4):  # many small writes, so many chunks with their own delay
        client.sendall(payload[i:i + 4])
        time.sleep(0.001)
    assert recv_exactly(server, len(payload)) == payload


def test_one_way_drop_loses_only_that_direction_and_its_heal_resets(wire: Wire) -> None:
    client, server = wire.connect()
    wire.proxy.update("l", up=DROP)
    client.sendall(b"a" * 1000)
    wait_for(lambda: wire.stats().dropped_up == 1000, "the proxy to discard the bytes", timeout=5)
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        server.recv(1)  # nothing of it reached the target
    server.setblocking(True)
    server.sendall(b"b" * 500)  # the other direction still delivers
    assert recv_exactly(client, 500) == b"b" * 500
    wire.proxy.heal("l")  # the stream lost bytes mid-way: it cannot continue
    wait_for(lambda: closed_by_proxy(client), "the client to be reset", timeout=5)
    assert wire.stats().reset == 1
    client2, server2 = wire.connect()  # and a new connection works
    client2.sendall(b"c")
    assert recv_exactly(server2, 1) == b"c"


def test_partition_resets_existing_and_new_connections_until_healed(wire: Wire) -> None:
    client, _ = wire.connect()
    wire.proxy.update("l", partition=Partition.RESET)
    assert closed_by_proxy(client)
    host, port = wire.address.rsplit(":", 1)
    try:
        late = socket.create_connection((host, int(port)), timeout=5)  # accepted...
        wire.sockets.append(late)
        assert closed_by_proxy(late)  # ...and reset at once
    except ConnectionResetError:
        pass  # reset so soon that connect() itself saw it
    wait_for(lambda: wire.stats().rejected == 1, "the rejection to be counted")
    wire.proxy.heal()
    client2, server2 = wire.connect()
    server2.sendall(b"ok")
    assert recv_exactly(client2, 2) == b"ok"
    assert wire.stats().reset == 2


def test_blackhole_partition_keeps_connections_silent_until_healed(wire: Wire) -> None:
    client, server = wire.connect()
    wire.proxy.update("l", partition=Partition.BLACKHOLE)
    client.sendall(b"u" * 100)
    server.sendall(b"d" * 50)
    wait_for(lambda: wire.stats().dropped_up == 100 and wire.stats().dropped_down == 50, "both directions dropped",
             timeout=5)
    late_client, late_server = wire.connect()  # new connections are made, and stay silent
    late_client.sendall(b"x")
    wait_for(lambda: wire.stats().dropped_up == 101, "the late byte dropped", timeout=5)
    for sock in (client, server, late_server):
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing arrived, and nothing was closed
            sock.recv(1)
    assert wire.stats().reset == 0
    wire.proxy.heal("l")
    assert closed_by_proxy(late_client)
    client.setblocking(True)
    assert closed_by_proxy(client)
    assert wire.stats().reset == 2


def test_refusing_partition_closes_the_listener_and_heal_reopens_it(wire: Wire) -> None:
    wire.proxy.set_faults("l", LinkFaults(partition=Partition.REFUSE))
    host, port = wire.address.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5)
    wire.proxy.heal("l")
    client, server = wire.connect()
    client.sendall(b"z")
    assert recv_exactly(server, 1) == b"z"


def test_flaky_link_resets_connections_and_heal_stops_it(wire: Wire) -> None:
    client, _ = wire.connect()
    wire.proxy.update("l", flaky_p=1.0)
    wait_for(lambda: closed_by_proxy(client), "a flaky reset", timeout=5)
    wire.proxy.heal("l")
    client2, server2 = wire.connect()
    for _ in range(5):  # a healthy link keeps the connection across many flaky ticks
        client2.sendall(b"k")
        assert recv_exactly(server2, 1) == b"k"
        time.sleep(0.05)
    assert wire.stats().reset == 1


def test_buffers_are_bounded_when_the_target_does_not_read(wire: Wire) -> None:
    client, _ = wire.connect()  # the target never reads
    client.setblocking(False)
    sent, stalled, chunk = 0, 0, b"\0" * 65536
    for _ in range(8192):  # bounded: at most 512 MiB offered or ~10 s of stalls
        try:
            sent += client.send(chunk)
            stalled = 0
        except BlockingIOError:
            stalled += 1
            if stalled == 20:  # a full second without progress: the proxy pushes back
                break
            time.sleep(0.05)
    else:
        pytest.fail(f"the proxy took {sent >> 20} MiB for a target that reads nothing")
    assert stalled == 20 and sent < 64 << 20, sent


def test_only_loopback_addresses_are_accepted() -> None:
    with NetProxy() as proxy:
        with pytest.raises(ValueError, match="127.0.0.0/8"):
            proxy.add_link("a", "127.0.0.1:1", listen="0.0.0.0:0")
        with pytest.raises(ValueError, match="127.0.0.0/8"):
            proxy.add_link("b", "10.0.0.1:80")
        with pytest.raises(ValueError, match="loopback"):
            proxy.add_link("c", "localhost:80")


def test_close_stops_listening_and_resets_connections() -> None:
    proxy = NetProxy()
    wire = Wire(proxy)
    client, _ = wire.connect()
    proxy.close()
    assert closed_by_proxy(client)
    host, port = wire.address.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5)
    with pytest.raises(RuntimeError, match="closed"):
        proxy.stats("l")
    wire.close()
