"""The Raft port closes connections that have not proven the password: one that
announces a huge message at once, one that stays idle past the bound."""
from __future__ import annotations

import select
import socket
import struct
import time
from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, wait_for
from tests.cluster.test_membership import with_an_agent
from tests.support.cluster import FAST, STABLE, Client
from tests.support.metrics import scrape

pytestmark = pytest.mark.cluster

FLOOD_BYTES = 24 << 20
AUTH_TIMEOUT_S = 1.0


def _address(raft: str) -> tuple[str, int]:
    host, _, port = raft.rpartition(":")
    return host, int(port)


def flood(raft: str) -> int:
    """Announce a FLOOD_BYTES message and stream it; the bytes the node took before it
    closed the connection."""
    chunk = b"\0" * (1 << 16)
    sent = 0
    with socket.create_connection(_address(raft), timeout=10) as sock:
        sock.sendall(struct.pack("i", FLOOD_BYTES))
        try:
            while sent < FLOOD_BYTES:
                sent += sock.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
    return sent


@pytest.mark.slow
def test_a_flood_at_the_leaders_raft_port_is_cut_short_and_forces_no_election(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3, settings=STABLE).start_all() as cluster:
        client, leader = with_an_agent(cluster)
        term = leader.status().term
        taken = [flood(leader.raft) for _ in range(3)]
        # Closed long before the end (what was sent sat in socket buffers); unguarded, all 24 MB go in.
        assert all(t < FLOOD_BYTES // 2 for t in taken), taken
        client.commit("a", 1)
        after = leader.status()
        assert (after.role, after.term) == ("leader", term)
        assert all(s.term == term for s in cluster.statuses().values())
        assert scrape(leader.metrics)['raftpoint_raft_connections_refused_total{reason="oversized"}'] == 3


@pytest.mark.slow
def test_idle_unauthenticated_connections_are_closed_within_the_bound(tmp_path: Path) -> None:
    settings = {**FAST, "raft_auth_timeout_s": AUTH_TIMEOUT_S}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        leader = cluster.leader()
        socks = [socket.create_connection(_address(leader.raft), timeout=10 * AUTH_TIMEOUT_S) for _ in range(5)]
        try:
            for sock in socks:  # a socket timeout (10 bounds) fails the test
                try:
                    assert sock.recv(1) == b""  # the node closed it
                except ConnectionResetError:
                    pass
        finally:
            for sock in socks:
                sock.close()
        wait_for(lambda: scrape(leader.metrics).get('raftpoint_raft_connections_refused_total{reason="idle"}') == 5,
                 "the idle connections counted")
        assert leader.status().role == "leader"  # peers' own connections were left alone
        Client(cluster).create_group()


@pytest.mark.slow
def test_one_address_holds_only_its_share_of_unauthenticated_connections(tmp_path: Path) -> None:
    """Closed at once, not after the (long) authentication bound: a host reopening idle
    connections holds its share of the node's descriptors, not all of them."""
    share = 4
    settings = {**FAST, "raft_auth_timeout_s": 60.0, "raft_unauthenticated_per_source": share}
    with LocalCluster(tmp_path / "c", 3, settings=settings).start_all() as cluster:
        leader = cluster.leader()
        socks = [socket.create_connection(_address(leader.raft), timeout=10, source_address=("127.0.0.2", 0))
                 for _ in range(5 * share)]
        try:
            open_ = set(socks)
            deadline = time.monotonic() + 10
            while len(open_) > share and time.monotonic() < deadline:
                readable, _, _ = select.select(list(open_), [], [], 0.1)
                for sock in readable:
                    try:
                        if sock.recv(1) == b"":
                            open_.discard(sock)
                    except ConnectionResetError:
                        open_.discard(sock)
            assert len(open_) == share, f"{len(open_)} of {len(socks)} idle connections from one address still open"
            assert open_ == set(socks[:share]), "not the newest were closed"
        finally:
            for sock in socks:
                sock.close()
        refused = scrape(leader.metrics).get('raftpoint_raft_connections_refused_total{reason="per_source"}')
        assert refused == 4 * share, refused
        assert leader.status().role == "leader"  # the peers' connections, from other addresses, were left alone
        Client(cluster).create_group()
