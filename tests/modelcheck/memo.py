"""A memo of a pure function's values that forgets them all once it holds its limit.

Every memo of the search (transitions applied, views of records, renderings, the
brute force's lines) maps an immutable key to a value computed from it alone, so a
value forgotten is only computed again, never wrong. Forgetting everything at once
costs nothing per lookup, where least-recently-used bookkeeping would cost every
lookup; and what the search asks for next is mostly what the worlds it is making now
need, which fills the memo again at once."""
from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict (lookups are the dict's own) whose `remember` keeps it under `limit` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> V:
        """Keep `value` for `key` (forgetting every other first if the memo is full); return it."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
