"""Keyset pages: every item once, in key order, across changes between the calls."""
from __future__ import annotations

import pytest

from coordinator.core import paging
from coordinator.core.errors import Code, Rejection


def key(item: tuple[str, int]) -> paging.Key:
    return item


def all_pages(items: list[tuple[str, int]], size: int) -> list[list[tuple[str, int]]]:
    pages, after = [], None
    while True:
        chosen, token = paging.page(items, key, after, size)
        pages.append(list(chosen))
        if not token:
            return pages
        after = paging.decode_token(token, 2)


def test_pages_cover_every_item_once_in_key_order() -> None:
    items = [("b", 2), ("a", 10), ("a", 9), ("c", 1), ("b", 1)]
    pages = all_pages(items, 2)
    assert pages == [[("a", 9), ("a", 10)], [("b", 1), ("b", 2)], [("c", 1)]]


def test_a_page_resumes_after_its_token_when_that_item_is_gone() -> None:
    chosen, token = paging.page([("a", 1), ("a", 2), ("b", 1)], key, None, 2)
    assert token == "a/2"
    rest, _ = paging.page([("a", 1), ("b", 1)], key, paging.decode_token(token, 2), 2)  # ("a", 2) was deleted
    assert list(rest) == [("b", 1)]


@pytest.mark.parametrize("size", [-1, paging.MAX_PAGE_SIZE + 1, 2**32])
def test_a_page_size_beyond_the_bound_is_refused_naming_it(size: int) -> None:
    with pytest.raises(Rejection) as info:
        paging.page_size(size)
    assert info.value.code is Code.INVALID_ARGUMENT and info.value.field == "page_size"
    assert str(paging.MAX_PAGE_SIZE) in info.value.reason


def test_no_page_size_means_the_largest_page() -> None:
    assert paging.page_size(0) == paging.MAX_PAGE_SIZE


@pytest.mark.parametrize("token", ["a", "a/b", "/1", "a/1/2", "a\n/1", "x" * 10_000])
def test_a_token_no_page_gave_is_refused(token: str) -> None:
    with pytest.raises(Rejection) as info:
        paging.decode_token(token, 2)
    assert info.value.field == "page_token" and len(info.value.reason) < 200


def test_a_dependency_token_names_receiver_interval_and_message() -> None:
    items = [("b", 2, "m0"), ("a", 1, "m2"), ("b", 1, "m3"), ("b", 1, "m1")]
    chosen, token = paging.page(items, lambda item: item, None, 2)
    assert list(chosen) == [("a", 1, "m2"), ("b", 1, "m1")] and token == "b/1/m1"
    rest, last = paging.page(items, lambda item: item, paging.decode_token(token, 3), 2)
    assert list(rest) == [("b", 1, "m3"), ("b", 2, "m0")] and last == ""


@pytest.mark.parametrize("token", ["b/1", "b/x/m1", "b/1/m 1", "b/1/m1/extra", "b/1/"])
def test_a_dependency_token_no_page_gave_is_refused(token: str) -> None:
    with pytest.raises(Rejection) as info:
        paging.decode_token(token, 3)
    assert info.value.field == "page_token", info.value
