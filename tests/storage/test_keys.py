"""Composite keys: byte order must be tuple order, and parse must invert key."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.storage import keys

# Any text except NUL (refused) and lone surrogates (not encodable as UTF-8).
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
uint = st.integers(0, 2**64 - 1)
part = text | uint


@st.composite
def same_shape_tuples(draw: st.DrawFn) -> list[tuple]:
    """Several (table, *parts) tuples whose parts have the same type position by position."""
    shape = draw(st.lists(st.sampled_from([text, uint]), max_size=4))
    one = st.tuples(st.sampled_from(["a", "b", "ab"]), *shape)
    return draw(st.lists(one, min_size=2, max_size=15))


@settings(max_examples=300, deadline=None)
@given(same_shape_tuples())
def test_byte_order_is_tuple_order(tuples: list[tuple]) -> None:
    assert sorted(tuples, key=lambda t: keys.key(*t)) == sorted(tuples)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(text, max_size=4).map(tuple), min_size=2, max_size=15))
def test_byte_order_is_tuple_order_across_lengths(tuples: list[tuple]) -> None:
    """A tuple sorts before its extensions: ("a",) < ("a", "") < ("a", "b") < ("ab",)."""
    assert sorted(tuples, key=lambda t: keys.key("t", *t)) == sorted(tuples)


@settings(max_examples=200, deadline=None)
@given(text, st.lists(part, max_size=6))
def test_parse_inverts_key(table: str, parts: list) -> None:
    assert keys.parse(keys.key(table, *parts)) == (table, tuple(parts))


@settings(max_examples=200, deadline=None)
@given(text, st.lists(part, min_size=1, max_size=5), part)
def test_prefix_selects_exactly_the_keys_with_those_first_parts(table: str, parts: list, other: object) -> None:
    full = keys.key(table, *parts)
    for n in range(len(parts) + 1):
        assert full.startswith(keys.prefix(table, *parts[:n]))
    changed = [*parts[:-1], other]
    assert keys.key(table, *changed).startswith(keys.prefix(table, *parts)) == (changed == parts)


def test_strings_and_ints_never_collide() -> None:
    assert keys.key("t", "1") != keys.key("t", 1)
    assert keys.key("t", 2**64 - 1) < keys.key("t", "")  # ints sort before strings
    assert not keys.key("t", "ab").startswith(keys.prefix("t", "a"))


@pytest.mark.parametrize("bad, error", [
    (("t", "a\x00b"), ValueError), (("t", -1), ValueError), (("t", 2**64), ValueError),
    (("t", True), TypeError), (("t", 1.5), TypeError), (("t", b"raw"), TypeError), ((5,), TypeError),
])
def test_bad_parts_are_refused(bad: tuple, error: type) -> None:
    with pytest.raises(error):
        keys.key(*bad)


@pytest.mark.parametrize("raw", [b"", b"x", b"sabc", b"st\x00i\x00\x01", b"i" + bytes(8), b"s\xff\x00"])
def test_parse_refuses_what_key_cannot_produce(raw: bytes) -> None:
    with pytest.raises(ValueError):
        keys.parse(raw)
