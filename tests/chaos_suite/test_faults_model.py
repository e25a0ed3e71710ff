"""The pure side of the network faults: link arithmetic, who dials whom, partitions."""
from __future__ import annotations

import random

import pytest

from chaos.linkfaults import (DOWN, DROP, PASS, UP, FlakyDice, LinkFaults, delay, loopback_address,
                              must_reset_on_change, release_time, reset_probability)
from chaos.topology import cut_pairs, partition_groups, raft_links


def test_release_times_keep_order_and_stay_within_the_jitter() -> None:
    rng = random.Random(3)
    fault = delay(50, jitter_ms=40)
    last, now = 0.0, 100.0
    for _ in range(2000):
        now += 0.001
        released = release_time(last, now, fault, rng)
        assert released >= last  # never before the chunk read ahead of it
        assert now + 0.010 - 1e-9 <= released or released == last  # at least delay - jitter, unless held back
        assert released <= max(last, now + 0.090 + 1e-9)
        last = released
    assert release_time(5.0, 1.0, PASS, rng) == 5.0 and release_time(0.0, 1.0, PASS, rng) == 1.0


def test_only_a_healed_drop_that_lost_bytes_needs_a_reset() -> None:
    assert must_reset_on_change(DROP, PASS, dropped_bytes=True)
    assert must_reset_on_change(DROP, delay(10), dropped_bytes=True)
    assert not must_reset_on_change(DROP, PASS, dropped_bytes=False)
    assert not must_reset_on_change(DROP, DROP, dropped_bytes=True)
    assert not must_reset_on_change(delay(10), PASS, dropped_bytes=True)


def test_flaky_probability_per_second_and_seeded_dice() -> None:
    assert reset_probability(0.0) == 0.0 and reset_probability(1.0) == 1.0
    # surviving ten 0.1 s ticks at p = 0.5/s is surviving one second: 1 - p
    assert (1 - reset_probability(0.5, 0.1)) ** 10 == pytest.approx(0.5)
    a, b, c = FlakyDice(11), FlakyDice(11), FlakyDice(12)
    run_a = [a.resets([3, 1, 2], 0.9) for _ in range(50)]
    assert run_a == [b.resets([1, 2, 3], 0.9) for _ in range(50)]  # same seed, same decisions
    assert run_a != [c.resets([1, 2, 3], 0.9) for _ in range(50)]
    survived = sum(not FlakyDice(s).resets([1], 0.5) for s in range(4000))
    assert 0.91 < survived / 4000 < 0.95  # 1 - 0.5 ** 0.1 = 0.067 per tick


def test_fault_values_are_checked() -> None:
    with pytest.raises(ValueError):
        delay(-1)
    with pytest.raises(ValueError):
        LinkFaults(flaky_p=1.5)
    with pytest.raises(ValueError):
        LinkFaults().direction("sideways")
    assert LinkFaults(up=DROP).direction(UP) is DROP and LinkFaults(up=DROP).direction(DOWN) is PASS
    assert loopback_address("127.3.2.1:80", "x") == ("127.3.2.1", 80)
    for bad in ("0.0.0.0:1", "192.168.1.1:80", "127.0.0.1", "127.0.0.1:http", "[::1]:80"):
        with pytest.raises(ValueError):
            loopback_address(bad, "x")


def test_the_greater_address_dials_and_directions_follow_it() -> None:
    links = raft_links(["127.0.1.1:9", "127.0.1.3:1", "127.0.1.2:5"])
    assert {(link.dialer, link.listener) for link in links.values()} == {(1, 0), (2, 0), (1, 2)}
    link = links[frozenset((0, 1))]
    assert link.name == "raft:1->0"
    assert link.direction(1, 0) == UP and link.direction(0, 1) == DOWN
    with pytest.raises(ValueError):
        link.direction(0, 2)
    # string order, as pysyncobj compares: "127.0.1.10" < "127.0.1.9"
    assert raft_links(["127.0.1.10:1", "127.0.1.9:1"])[frozenset((0, 1))].dialer == 1


def test_partition_groups_and_the_pairs_they_cut() -> None:
    groups = partition_groups([[0]], 3)
    assert groups == [frozenset({0}), frozenset({1, 2})]
    assert cut_pairs(groups) == {frozenset((0, 1)), frozenset((0, 2))}
    assert cut_pairs(partition_groups([[0], [1], [2]], 3)) == {frozenset(p) for p in [(0, 1), (0, 2), (1, 2)]}
    assert cut_pairs(partition_groups([[0, 1, 2]], 3)) == set()
    for bad in ([[0], [0, 1]], [[]], [[3]]):
        with pytest.raises(ValueError):
            partition_groups(bad, 3)
