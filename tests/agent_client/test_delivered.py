"""Exact duplicate detection: the range set against a plain set of every key."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_client.delivered import DeliveredSet

keys = st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 3), st.integers(1, 40))


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=200), st.lists(keys, max_size=30))
def test_matches_a_plain_set_and_survives_json(added: list, probes: list) -> None:
    delivered, plain = DeliveredSet(), set()
    for key in added:
        assert delivered.add(key) == (key not in plain)
        plain.add(key)
    restored = DeliveredSet.from_json(json.loads(json.dumps(delivered.to_json())))
    for key in added + probes:
        assert (key in delivered) == (key in plain) == (key in restored)
    assert len(delivered) == len(plain) == len(restored)


def test_dense_channels_cost_one_range_each_whatever_the_order() -> None:
    delivered = DeliveredSet()
    order = list(range(1, 10_001))
    order[::2], order[1::2] = order[1::2], order[::2]  # every pair swapped: reordered delivery
    for seq in order:
        delivered.add(("a", 1, seq))
    delivered.add(("a", 2, 500))  # a new generation restarts from the restored number
    assert len(delivered) == 10_001 and delivered.ranges() == 2
    assert ("a", 1, 1) in delivered and ("a", 1, 10_001) not in delivered and ("a", 2, 499) not in delivered


def test_an_old_format_blob_loads_empty() -> None:
    assert len(DeliveredSet.from_json(["a.1.3.abcd", "b.1.1.ef01"])) == 0
