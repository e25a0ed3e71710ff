"""Who may open one more connection: a share per address for connections not yet
authenticated, the last slots for known addresses, a hard cap for all."""
from __future__ import annotations

import pytest

from coordinator.core.connection_caps import FULL, PER_SOURCE, ConnectionCaps, ConnectionLedger, beyond_share, source_of

CAPS = ConnectionCaps(max_connections=10, unauthenticated_per_source=3, reserved=4, known_for_s=60.0)


def test_one_address_gets_its_share_of_unauthenticated_connections_and_no_more() -> None:
    ledger = ConnectionLedger(CAPS)
    for _ in range(3):
        assert ledger.refusal("10.0.0.1", 0.0) is None
        ledger.opened("10.0.0.1")
    assert ledger.refusal("10.0.0.1", 0.0) == PER_SOURCE
    assert ledger.refusal("10.0.0.2", 0.0) is None  # another address is not affected
    ledger.proven("10.0.0.1", 1.0)  # one of them authenticated: it no longer counts against the share
    assert ledger.refusal("10.0.0.1", 1.0) is None
    ledger.closed("10.0.0.1", proven=False)
    assert ledger.unproven("10.0.0.1") == 1 and ledger.total == 2


def test_the_reserved_slots_are_for_known_addresses_only() -> None:
    ledger = ConnectionLedger(CAPS)
    ledger.always_know({"10.9.9.9", "10.9.9.8"})  # peers
    for i in range(6):  # strangers fill the 6 slots open to them
        ledger.opened(f"10.0.0.{i}")
    assert ledger.refusing_strangers()
    assert ledger.refusal("10.0.1.1", 0.0) == FULL
    assert ledger.refusal("10.9.9.9", 0.0) is None
    ledger.opened("10.0.0.0")  # a stranger's connection...
    ledger.proven("10.0.0.0", 5.0)  # ...that authenticated makes its address known for known_for_s
    assert ledger.refusal("10.0.0.0", 5.0 + 59) is None
    assert ledger.refusal("10.0.0.0", 5.0 + 61) == FULL
    for _ in range(3):
        ledger.opened("10.9.9.9")
    assert ledger.total == CAPS.max_connections and ledger.refusal("10.9.9.8", 0.0) == FULL


def test_forgotten_addresses_leave_the_table() -> None:
    ledger = ConnectionLedger(CAPS)
    ledger.opened("10.0.0.1")
    ledger.proven("10.0.0.1", 0.0)
    ledger.forget_expired(61.0)
    assert not ledger.known("10.0.0.1", 0.0)


def test_caps_that_leave_strangers_nothing_are_refused() -> None:
    with pytest.raises(ValueError):
        ConnectionCaps(max_connections=4, unauthenticated_per_source=1, reserved=4)
    assert ConnectionCaps.of(2048, 64).reserved == 512 and ConnectionCaps.of(2, 64).reserved == 0


def test_the_newest_connections_beyond_an_addresses_share_are_the_ones_to_close() -> None:
    oldest_first = [("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5), ("a", 6)]
    assert beyond_share(oldest_first, 2, lambda c: c[0]) == [("a", 4), ("a", 6)]


@pytest.mark.parametrize("host, source", [
    ("10.1.2.3", "10.1.2.3"),
    ("::ffff:10.1.2.3", "10.1.2.3"),  # an IPv4 client of a dual-stack socket
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # a host's whole /64 is one source
    ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
    ("::1", "::1"),
])
def test_a_connection_counts_against_its_ipv4_address_or_ipv6_network(host: str, source: str) -> None:
    assert source_of(host) == source
