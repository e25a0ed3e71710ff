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
        # Only the busy port and one more below a fake ephemeral range: the busy one is skipped.
        monkeypatch.setattr(local_cluster, "_LOWEST_PORT", busy)
        monkeypatch.setattr(local_cluster, "_ephemeral_low", lambda: busy + 2)
        monkeypatch.setattr(local_cluster, "_PICK_ATTEMPTS", 2)
        ports = free_ports(1)
    assert ports != [busy]
