"""Every address a node listens on is checked before the node starts.

pysyncobj retries a Raft port it cannot bind forever, so a node whose Raft port
was taken said "node started" and stayed a follower of nothing; and gRPC shares a
port by default (SO_REUSEPORT), so a second node on a used gRPC port silently
split the clients between two servers. Binding each address once up front, the
way the node's own servers bind it, turns both into an error that names the
address, before any state is opened.
"""
from __future__ import annotations

import socket


class PortUnavailable(OSError):
    """An address the node must listen on cannot be bound; the message names it."""


def check_bindable(address: str, what: str) -> None:
    """Raise PortUnavailable unless a listening socket could be bound to `address` now."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot bind {what} address {address}: {exc.strerror}") from None
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As pysyncobj and gRPC set it: a port left in TIME_WAIT by our own last run is
        # usable, a port some process listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
            probe.listen(1)
        except OSError as exc:
            raise PortUnavailable(f"cannot bind {what} address {address}: {exc.strerror}") from None


def check_all(addresses: dict[str, str]) -> None:
    """Check each {what: address}; the first that cannot be bound raises."""
    for what, address in addresses.items():
        check_bindable(address, what)
