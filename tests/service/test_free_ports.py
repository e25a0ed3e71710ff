"""The harness's ports come from below the kernel's ephemeral range, where no outgoing
connection can take one between a cluster's stop and its restart on the same ports."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from coordinator.harness import local_cluster
from coordinator.harness.local_cluster import free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(6)
    assert len(set(ports)) == 6
    if low - local_cluster._LOWEST_PORT >= 6:
        assert all(local_cluster._LOWEST_PORT <= p < low for p in ports), (ports, low)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        _only_candidate(monkeypatch, busy)
        ports = free_ports(1)
    assert ports != [busy]


def _only_candidate(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """Make `port` the one port below a fake ephemeral range, so free_ports tries it
    first (and, if it is refused, takes one from the kernel)."""
    monkeypatch.setattr(local_cluster, "_LOWEST_PORT", port)
    monkeypatch.setattr(local_cluster, "_ephemeral_low", lambda: port + 1)


def test_a_port_taken_on_another_loopback_address_is_never_handed_out_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = ["127.0.1.1", "127.0.1.2"]
    with socket.socket() as taken:
        taken.bind((hosts[1], 0))  # free on 127.0.0.1 and on hosts[0]: taken only where node 1 binds
        busy = taken.getsockname()[1]
        _only_candidate(monkeypatch, busy)
        ports = free_ports(1, hosts)
    assert ports != [busy], f"port {busy} is bound on {hosts[1]}, yet free_ports({hosts}) handed it out"
    for host in hosts:
        with socket.socket() as sock:
            sock.bind((host, ports[0]))


def test_no_port_free_on_every_host_is_a_clear_error() -> None:
    with pytest.raises(OSError, match="0 of 1 ports free on every one of"):
        free_ports(1, ["127.0.0.1", "192.0.2.1"])  # TEST-NET: no interface of this machine has it


def test_ports_checked_on_no_address_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one address"):
        free_ports(1, [])
