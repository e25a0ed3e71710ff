"""A page of a group's agents read from where it starts equals the same page cut from
the whole group, whatever the layers above the store add or delete: the store, the
batches handed over but not yet committed, the cache's pending batch and the reader's
own writes, each of which may add an agent or delete one the layers below hold."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.model import Agent
from coordinator.storage import keys
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import AGENT, KvState, RecordCache, encode_writes

IDS = [f"a{n:02d}" for n in range(12)] + ["b", "b0", "ba"]  # "b" < "b0" < "ba": prefixes of one another
GROUPS = ("g", "g2")  # a second group beside it, whose agents no page of "g" may show

# One layer: agent ids mapped to a new incarnation (added or changed) or None (deleted).
layer = st.dictionaries(st.sampled_from(IDS), st.one_of(st.none(), st.integers(1, 9)), max_size=6)


def writes(group: str, changes: dict[str, int | None]) -> dict[bytes, object | None]:
    return {keys.key(AGENT, group, agent_id): None if n is None else Agent(group, agent_id, n)
            for agent_id, n in changes.items()}


@settings(max_examples=300, deadline=None)
@given(stored=layer, handed_over=st.lists(layer, max_size=3), pending=layer, own=layer, other=layer,
       after=st.one_of(st.none(), st.sampled_from(IDS + ["a", "c"])), limit=st.integers(0, 6))
def test_a_page_read_from_its_start_equals_the_page_cut_from_the_whole_group(
        stored, handed_over, pending, own, other, after, limit) -> None:
    store = MemoryStore()
    base = {**writes("g", {k: v for k, v in stored.items() if v is not None}),
            **writes("g2", {k: v for k, v in other.items() if v is not None})}
    store.commit(encode_writes(base), 1)
    layers = tuple(writes("g", changes) for changes in handed_over)
    cache = RecordCache(store, layers=lambda: layers)
    cache.pending.update(writes("g", pending))
    state = KvState(cache)
    state.writes.update(writes("g", own))

    whole = [a for a in state.agents("g") if after is None or a.agent_id > after][:limit]
    page = state.agents_after("g", after, limit)
    assert page == whole, f"after {after!r}, limit {limit}: read {page}, the whole group gives {whole}"


def test_a_page_decodes_the_page_not_the_group() -> None:
    store = MemoryStore()
    store.commit(encode_writes(writes("g", {f"a{n:04d}": 1 for n in range(2000)})), 1)
    scanned: list[int] = []
    real_scan = store.scan

    def counting_scan(prefix, start=None, limit=None):
        found = real_scan(prefix, start, limit)
        scanned.append(len(found))
        return found
    store.scan = counting_scan  # type: ignore[method-assign]
    page = KvState(RecordCache(store)).agents_after("g", "a0999", 3)
    assert [a.agent_id for a in page] == ["a1000", "a1001", "a1002"]
    assert sum(scanned) <= 3, f"read {scanned} records from the store for a page of 3"
