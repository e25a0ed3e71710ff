"""Pages of a long answer (a group's checkpoints or agents), resumable by a token.

An answer in one message grew with the state until it passed the 4 MB message
limit, and was built whole on the node meanwhile. A page holds at most
MAX_PAGE_SIZE items; its token names the last item's sort key, so the next page
starts after that key: items added or deleted between the calls neither repeat
nor shift the rest (keyset, not offset, pagination).
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

from coordinator.core import ids
from coordinator.core.errors import Rejection, shown

T = TypeVar("T")
MAX_PAGE_SIZE = 1000
# What a token holds: an agent id, then (for checkpoints) an index, then (for
# dependency records) a message id. Each part is an id or a number: none holds a "/".
Key = tuple[str, ...] | tuple[str, int] | tuple[str, int, str]


def page_size(requested: int) -> int:
    """0 asks for the largest page."""
    if not 0 <= requested <= MAX_PAGE_SIZE:
        raise Rejection.invalid("page_size", f"must be between 0 (the largest page) and {MAX_PAGE_SIZE}, "
                                             f"got {shown(requested)}")
    return requested or MAX_PAGE_SIZE


def encode_token(key: Key) -> str:
    return "/".join(str(part) for part in key)


def decode_token(token: str, parts: int) -> Key | None:
    """The key a token names (None for no token: the first page); INVALID_ARGUMENT for a token
    no page gave."""
    if not token:
        return None
    fields = token.split("/")
    try:
        if len(fields) != parts:
            raise ValueError
        ids.check_id(fields[0], "page_token")
        if parts == 1:
            return (fields[0],)
        if not fields[1].isdigit():
            raise ValueError
        if parts == 2:
            return fields[0], int(fields[1])
        ids.check_id(fields[2], "page_token")
        return fields[0], int(fields[1]), fields[2]
    except (ValueError, Rejection):
        raise Rejection.invalid("page_token", f"is not a token a previous page gave, got {shown(token)}") from None


def page(items: Iterable[T], key: Callable[[T], Key], after: Key | None, size: int) -> tuple[Sequence[T], str]:
    """The first `size` items whose key is above `after`, in key order, and the token of
    the next page ("" when this page is the last)."""
    ordered = sorted((key(item), n, item) for n, item in enumerate(items))
    rest = [(k, item) for k, _, item in ordered if after is None or k > after]
    chosen = rest[:size]
    token = encode_token(chosen[-1][0]) if len(rest) > size else ""
    return [item for _, item in chosen], token
