"""How ChaosCluster wires nodes to proxies, checked on the commands it would run (no processes)."""
from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Iterator

import pytest

from chaos.controller import ChaosCluster, NoDisks
from chaos.topology import grpc_link_name


@pytest.fixture
def unstarted(tmp_path: Path) -> Iterator[ChaosCluster]:
    planted = [sys.executable, "-m", "chaos.planted", "--bug", "skip-dedupe"]
    with ChaosCluster(tmp_path, 4, node_command=lambda i: planted if i == 2 else [sys.executable, "-m", "x"]) as c:
        yield c


def peers_of(chaos: ChaosCluster, i: int) -> list[tuple[str, str]]:
    args = chaos.local.command(chaos.nodes[i])
    return [tuple(p.split("=")) for p in args[args.index("--peers") + 1].split(",")]


def test_dialers_get_proxy_addresses_listeners_real_ones_and_clients_proxied_grpc(unstarted: ChaosCluster) -> None:
    chaos = unstarted
    for node in chaos.nodes:
        peers = peers_of(chaos, node.index)
        assert len(peers) == chaos.size - 1
        for raft, grpc in peers:
            peer = chaos.node_of(raft)
            assert grpc == chaos.endpoints()[peer]
            if node.raft > chaos.nodes[peer].raft:  # pysyncobj: this node dials the peer
                assert raft == chaos.proxy.address(chaos.raft_links[frozenset((node.index, peer))].name)
                assert node.raft > raft  # and still dials the proxy
            else:
                assert raft == chaos.nodes[peer].raft
    proxies = [chaos.proxy.address(name) for name in chaos.proxy.links()]
    assert all(node.raft > p for node in chaos.nodes for p in proxies)
    assert set(chaos.endpoints()) == {chaos.proxy.address(grpc_link_name(i)) for i in range(4)}


def test_node_command_hook_and_address_map(unstarted: ChaosCluster) -> None:
    chaos = unstarted
    args = chaos.local.command(chaos.nodes[2])
    assert args[:6] == [sys.executable, "-m", "chaos.planted", "--bug", "skip-dedupe", "coordinator"]
    assert chaos.local.command(chaos.nodes[0])[:4] == [sys.executable, "-m", "x", "coordinator"]
    for node in chaos.nodes:
        assert chaos.node_of(node.raft) == chaos.node_of(node.grpc) == node.index
        assert chaos.node_of(chaos.endpoints()[node.index]) == node.index
    assert chaos.node_of("127.0.0.1:1") is None


def test_fault_arguments_are_checked_and_disk_faults_need_disks(unstarted: ChaosCluster) -> None:
    with pytest.raises(NoDisks, match="disks="):
        unstarted.fill(0)
    with pytest.raises(NoDisks):
        unstarted.power_cut(1)
    with pytest.raises(ValueError):
        unstarted.one_way(1, 1)
    with pytest.raises(ValueError):
        unstarted.delay(0, 9, 10)
    with pytest.raises(ValueError):
        unstarted.partition([[0], [0, 1]])


def test_partition_replaces_the_previous_one_and_keeps_other_faults(unstarted: ChaosCluster) -> None:
    chaos = unstarted
    chaos.delay(0, 1, 20)
    chaos.isolate(0)
    cut = {name for name, f in chaos.faults().items() if f.partition is not None}
    assert cut == {chaos.raft_links[frozenset((0, j))].name for j in (1, 2, 3)}
    chaos.partition([[0, 1], [2, 3]])
    cut = {name for name, f in chaos.faults().items() if f.partition is not None}
    assert cut == {chaos.raft_links[frozenset(p)].name for p in [(0, 2), (0, 3), (1, 2), (1, 3)]}
    assert chaos.faults()[chaos.raft_links[frozenset((0, 1))].name].up.delay_ms == 20
    chaos.heal()
    assert chaos.faults() == {}


def test_close_stops_every_proxy(tmp_path: Path) -> None:
    chaos = ChaosCluster(tmp_path, 3)
    host, port = chaos.endpoints()[0].rsplit(":", 1)
    try:  # listening; with no node behind it the proxy resets the connection
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionResetError:
        pass
    chaos.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5)
