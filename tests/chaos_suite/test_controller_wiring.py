"""How ChaosCluster wires nodes to proxies, checked on the commands it would run (no processes)."""
from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Iterator

import pytest

from chaos.controller import ChaosCluster
from chaos.disk_faults import NoDisks
from chaos.topology import grpc_link_name
from tests.support.tls import clients_trust


@pytest.fixture
def unstarted(tmp_path: Path) -> Iterator[ChaosCluster]:
    with ChaosCluster(tmp_path, 4, bug="no-dedupe") as c, clients_trust(c):
        yield c


def peers_of(chaos: ChaosCluster, i: int) -> list[tuple[str, str]]:
    args = chaos.local.command(chaos.nodes[i])
    return [tuple(p.split("=")) for p in args[args.index("--peers") + 1].split(",")]


def routes_of(chaos: ChaosCluster, i: int) -> dict[str, str]:
    args = chaos.local.command(chaos.nodes[i])
    return dict(args[k + 1].split("=") for k, a in enumerate(args) if a == "--route")


def test_nodes_name_peers_by_real_raft_addresses_dials_go_through_proxies_clients_proxied_grpc(
        unstarted: ChaosCluster) -> None:
    chaos = unstarted
    for node in chaos.nodes:
        peers = peers_of(chaos, node.index)
        assert len(peers) == chaos.size - 1
        assert {raft for raft, _ in peers} == {n.raft for n in chaos.nodes if n is not node}
        for raft, grpc in peers:
            assert grpc == chaos.endpoints()[chaos.node_of(raft)]
        dialled = {peer.raft for peer in chaos.nodes if node.raft > peer.raft}  # pysyncobj: the greater dials
        routes = routes_of(chaos, node.index)
        assert set(routes) == dialled
        for raft, via in routes.items():
            link = chaos.raft_links[frozenset((node.index, chaos.node_of(raft)))]
            assert (link.dialer, via) == (node.index, chaos.proxy.address(link.name))
    assert set(chaos.endpoints()) == {chaos.proxy.address(grpc_link_name(i)) for i in range(4)}


def test_node_program_plants_the_bug_and_address_map(unstarted: ChaosCluster) -> None:
    chaos = unstarted
    for node in chaos.nodes:
        args = chaos.local.command(node)
        assert args[:3] == [sys.executable, "-m", "chaos.node"]
        assert args[args.index("--bug") + 1] == "no-dedupe" and args.index("--bug") < args.index("--raft-address")
        assert chaos.node_of(node.raft) == chaos.node_of(node.grpc) == node.index
        assert chaos.node_of(chaos.endpoints()[node.index]) == node.index
    assert chaos.node_of("127.0.0.1:1") is None
    with pytest.raises(ValueError, match="unknown bug"):
        ChaosCluster(chaos.local.root / "other", 3, bug="nonsense")


def test_fault_arguments_are_checked_and_disk_faults_need_disks(unstarted: ChaosCluster) -> None:
    with pytest.raises(NoDisks, match="disks="):
        unstarted.disks.fill(0)
    with pytest.raises(NoDisks):
        unstarted.power_cut(1)
    with pytest.raises(ValueError):
        unstarted.network.one_way(1, 1)
    with pytest.raises(ValueError):
        unstarted.network.delay(0, 9, 10)
    with pytest.raises(ValueError):
        unstarted.network.partition([[0], [0, 1]])


def test_partition_replaces_the_previous_one_and_keeps_other_faults(unstarted: ChaosCluster) -> None:
    chaos = unstarted
    chaos.network.delay(0, 1, 20)
    chaos.network.isolate(0)
    cut = {name for name, f in chaos.network.faults().items() if f.partition is not None}
    assert cut == {chaos.raft_links[frozenset((0, j))].name for j in (1, 2, 3)}
    chaos.network.partition([[0, 1], [2, 3]])
    cut = {name for name, f in chaos.network.faults().items() if f.partition is not None}
    assert cut == {chaos.raft_links[frozenset(p)].name for p in [(0, 2), (0, 3), (1, 2), (1, 3)]}
    assert chaos.network.faults()[chaos.raft_links[frozenset((0, 1))].name].up.delay_ms == 20
    chaos.network.heal()
    assert chaos.network.faults() == {}


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
