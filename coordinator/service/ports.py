"""Every address a node listens on is resolved once and checked before the node starts.

pysyncobj retries a Raft port it cannot bind forever, so a node whose Raft port
was taken said "node started" and stayed a follower of nothing; and gRPC shares a
port by default (SO_REUSEPORT), so a second node on a used gRPC port silently
split the clients between two servers. Binding each address once up front, the
way the node's own servers bind it, turns both into an error that names the
address, before any state is opened.

A node's own name (a pod's or container's stable name) may not resolve yet while
the cluster's DNS settles, and may stop resolving for a moment after it did. So a
name is given a short wait to resolve, and the node's listeners then bind the IP
found here, never the name again: pysyncobj's own resolver answers None for a name
that fails, which its server turned into a TypeError from inet_aton.
"""
from __future__ import annotations

import socket
import time
from typing import Callable

# How long a node waits for its own name to resolve before it gives up with one line.
RESOLVE_WAIT_S = 10.0
RESOLVE_RETRY_S = 0.25


class PortUnavailable(OSError):
    """An address the node must listen on cannot be bound; the message names it."""


Resolved = tuple[socket.AddressFamily, tuple]


def resolve(address: str, what: str, wait_s: float = RESOLVE_WAIT_S,
            sleep: Callable[[float], None] = time.sleep) -> Resolved:
    """The family and socket address "host:port" names (its first, as the node's servers
    take it), retrying a name that does not resolve for up to `wait_s` seconds."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
            return family, sockaddr
        except socket.gaierror as exc:
            if time.monotonic() >= deadline:
                waited = f" (still after {wait_s:g} s)" if wait_s > 0 else ""
                raise PortUnavailable(f"cannot bind {what} address {address}: {exc.strerror}{waited}") from None
        sleep(RESOLVE_RETRY_S)


def check_bindable(address: str, what: str, wait_s: float = RESOLVE_WAIT_S) -> str:
    """Raise PortUnavailable unless a listening socket could be bound to `address` now;
    return the numeric "ip:port" that was bound (IPv6 in brackets)."""
    family, sockaddr = resolve(address, what, wait_s)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As pysyncobj and gRPC set it: a port left in TIME_WAIT by our own last run is
        # usable, a port some process listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
            probe.listen(1)
        except OSError as exc:
            raise PortUnavailable(f"cannot bind {what} address {address}: {exc.strerror}") from None
    ip, port = sockaddr[:2]
    return f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"


def check_all(addresses: dict[str, str], wait_s: float = RESOLVE_WAIT_S) -> dict[str, str]:
    """Check each {what: address}; the first that cannot be bound raises. Returns
    {what: the numeric address bound}, for the node's listeners to bind in turn."""
    return {what: check_bindable(address, what, wait_s) for what, address in addresses.items()}
