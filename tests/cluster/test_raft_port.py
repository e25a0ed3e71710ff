"""The Raft port closes connections that have not proven the password: one that
announces a huge message at once, one that stays idle past the bound."""
from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, node_status, wait_for
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
