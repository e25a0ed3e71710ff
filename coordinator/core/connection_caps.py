"""Who may open one more connection to a node's gRPC port (pure: the caller passes the time).

A connection costs the node a slot from the moment it is accepted, long before the
caller has shown who it is. One host holding a node's 2,048 slots with silent TCP
connections (reopened as the handshake allowance closed them) locked every other
client out of a leader that kept leading. Three rules bound what a stranger can
hold:

- no address holds more than `unauthenticated_per_source` connections that have not
  yet made an authenticated call, so one host takes a small share, not all;
- the last `reserved` slots go only to known addresses: the node's peers and
  itself, and addresses whose connections made an authenticated call within
  `known_for_s` (agents reconnecting to the node they used), so many strangers
  together still leave room for them;
- nobody gets more than `max_connections` at once.

A connection "proves" its address by its first call that passes authentication (on
a node without authentication, its first call of the coordinator's services);
health checks and reflection, open to anyone, prove nothing.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")

# Why a connection was refused (the label of the refusal count).
PER_SOURCE = "per_source"  # its address already holds its share of unauthenticated connections
FULL = "full"  # every slot it may take is taken


def source_of(host: str) -> str:
    """The address a connection counts against: its IPv4 address, or the /64 network
    of an IPv6 one (one host usually holds a whole /64)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and not address.is_loopback:
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def beyond_share(connections: Iterable[T], share: int, source: Callable[[T], str]) -> list[T]:
    """The connections past the first `share` of each source, in the order given
    (oldest first: the newest are the ones to close)."""
    seen: dict[str, int] = {}
    beyond = []
    for conn in connections:
        key = source(conn)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > share:
            beyond.append(conn)
    return beyond


@dataclass(frozen=True)
class ConnectionCaps:
    """The three bounds of the module docstring."""

    max_connections: int
    unauthenticated_per_source: int
    reserved: int
    known_for_s: float = 3600.0

    def __post_init__(self) -> None:
        if not 0 <= self.reserved < self.max_connections:
            raise ValueError(f"reserved ({self.reserved}) must be below max_connections ({self.max_connections})")
        if self.unauthenticated_per_source < 1:
            raise ValueError("unauthenticated_per_source must be at least 1")

    @classmethod
    def of(cls, max_connections: int, unauthenticated_per_source: int) -> "ConnectionCaps":
        """Caps with a quarter of the slots (at most 1,024) kept for known addresses."""
        return cls(max_connections, unauthenticated_per_source, min(max_connections // 4, 1024))


@dataclass
class ConnectionLedger:
    """The connections a node holds, by address, and the addresses it knows.

    The caller (transport.connection_front) asks `refusal` before it keeps an accepted
    connection, then reports `opened`, `proven` (at most once per connection) and
    `closed`; `now` is a monotonic time in seconds."""

    caps: ConnectionCaps
    total: int = 0
    _unproven: dict[str, int] = field(default_factory=dict)
    _known_until: dict[str, float] = field(default_factory=dict)
    _always_known: frozenset[str] = frozenset()

    def always_know(self, addresses: Iterable[str]) -> None:
        """The addresses that are known whatever they did (peers, the node's own)."""
        self._always_known = frozenset(addresses)

    def known(self, source: str, now: float) -> bool:
        return source in self._always_known or self._known_until.get(source, float("-inf")) > now

    def refusal(self, source: str, now: float) -> str | None:
        """Why a new connection from `source` is refused (PER_SOURCE or FULL), or None."""
        if self._unproven.get(source, 0) >= self.caps.unauthenticated_per_source:
            return PER_SOURCE
        if self.total >= self.slots_for(self.known(source, now)):
            return FULL
        return None

    def slots_for(self, known: bool) -> int:
        return self.caps.max_connections if known else self.caps.max_connections - self.caps.reserved

    def refusing_strangers(self) -> bool:
        """Whether a new connection from an address the node does not know is refused
        now, whatever its address: the node is full for new clients."""
        return self.total >= self.slots_for(known=False)

    def opened(self, source: str) -> None:
        self.total += 1
        self._unproven[source] = self._unproven.get(source, 0) + 1

    def proven(self, source: str, now: float) -> None:
        """An open, unproven connection from `source` made an authenticated call."""
        self._drop_unproven(source)
        self._known_until[source] = now + self.caps.known_for_s

    def closed(self, source: str, proven: bool) -> None:
        self.total -= 1
        if not proven:
            self._drop_unproven(source)

    def unproven(self, source: str) -> int:
        return self._unproven.get(source, 0)

    def forget_expired(self, now: float) -> None:
        """Forget addresses no longer known (bounds the table to recent callers)."""
        for source in [s for s, until in self._known_until.items() if until <= now]:
            del self._known_until[source]

    def _drop_unproven(self, source: str) -> None:
        left = self._unproven.get(source, 0) - 1
        if left > 0:
            self._unproven[source] = left
        else:
            self._unproven.pop(source, None)
