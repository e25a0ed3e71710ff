"""ThreadHead: the pure rules of a LangGraph thread's stored form (head, sealed segments, writes)."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.base")
from agent_client.langgraph.thread_history import (ThreadHead, UnknownFormat, rebuild,  # noqa: E402
                                                   sealed_namespaces)
from agent_client.langgraph.thread_record import (StoredCheckpoint, inline_ref, merge_writes, uri_ref,  # noqa: E402
                                                  version_key)

CP, META = ("msgpack", b"cp"), ("msgpack", b"meta")


class Segments:
    """A blob store for segments, in memory, that counts reads."""

    def __init__(self) -> None:
        self.stored: dict[str, str] = {}
        self.reads = 0

    def upload(self, doc: dict[str, Any]) -> str:
        uri = f"mem://{len(self.stored)}"
        self.stored[uri] = json.dumps(doc)
        return uri

    def fetch(self, uri: str) -> dict[str, Any]:
        self.reads += 1
        return json.loads(self.stored[uri])


def _id(n: int) -> str:
    return f"{n:08d}"


def _put(head: ThreadHead, segments: Segments, n: int, ns: str = "") -> ThreadHead:
    """Step n: channel a takes value n (inline), b keeps its first value (a blob)."""
    head = head.copy_as(head.thread_id)
    if head.seal_due:
        head.sealed_into(segments.upload(head.segment()))
    new = {"a": (version_key(n), inline_ref(("json", str(n).encode())))}
    if n == 1:
        new["b"] = (version_key(1), uri_ref("file:///b1"))
    head.put(ns, _id(n), CP, META, _id(n - 1) if n > 1 else None, {"a": version_key(n), "b": version_key(1)},
             new, segments.fetch)
    return head


def _thread(steps: int, seal_after: int = 4) -> tuple[ThreadHead, Segments]:
    head, segments = ThreadHead("t", seal_after=seal_after), Segments()
    for n in range(1, steps + 1):
        head = _put(head, segments, n)
    return head, segments


def test_the_head_stays_small_and_every_checkpoint_stays_reachable() -> None:
    head, segments = _thread(30)
    assert len(head.items) <= 4 and len(segments.stored) == 7
    chain = list(head.newest_first(segments.fetch))
    assert [s.checkpoint_id for s in chain] == [_id(n) for n in range(30, 0, -1)]
    assert all(s.refs["b"] == uri_ref("file:///b1") for s in chain)  # a value set once is seen by every step
    assert [s.refs["a"] for s in chain[:2]] == [inline_ref(("json", b"30")), inline_ref(("json", b"29"))]


def test_the_latest_and_a_short_list_read_no_older_segment() -> None:
    head, segments = _thread(30)
    segments.reads = 0
    assert head.find("", None, segments.fetch).checkpoint_id == _id(30)
    assert segments.reads == 0
    assert len([s for _, s in zip(range(4), head.newest_first(segments.fetch))]) == 4
    assert segments.reads == 1
    assert head.find("", _id(3), segments.fetch).checkpoint_id == _id(3)
    assert segments.reads == 1 + 7  # an old id: one read per segment back to it
    assert head.find("", _id(99), segments.fetch) is None and segments.reads == 8  # newer than all: no read


def test_the_namespaces_of_a_chain_are_learned_once_and_then_one_segment_at_a_time() -> None:
    head, segments = _thread(30)
    segments.reads = 0
    known = sealed_namespaces(head, segments.fetch, None)
    assert known == (head.sealed, frozenset({""})) and segments.reads == 7
    for n in range(31, 38):  # seals 29-32, then 33-36
        head = _put(head, segments, n, ns="sub" if n == 33 else "")
    segments.reads = 0
    assert sealed_namespaces(head, segments.fetch, known) == (head.sealed, frozenset({"", "sub"}))
    assert segments.reads == 2  # the two sealed since


def test_writes_to_a_sealed_checkpoint_are_patched_once_and_in_order() -> None:
    head, segments = _thread(10)
    assert head.put_writes("", _id(2), "task", "~0", [(0, "a", ("json", b"1"))], segments.fetch)
    assert not head.put_writes("", _id(2), "task", "~0", [(0, "a", ("json", b"other"))], segments.fetch)
    assert head.put_writes("", _id(2), "task", "~0", [(-1, "__error__", ("json", b"e1"))], segments.fetch)
    assert head.put_writes("", _id(2), "task", "~0", [(-1, "__error__", ("json", b"e2"))], segments.fetch)
    assert [w[1:] for w in head.find("", _id(2), segments.fetch).sorted_writes()] == [
        ("__error__", ("json", b"e2")), ("a", ("json", b"1"))]
    for n in range(11, 20):  # the patch itself gets sealed
        head = _put(head, segments, n)
    assert [w[1] for w in head.find("", _id(2), segments.fetch).sorted_writes()] == ["__error__", "a"]


def test_a_checkpoint_stored_again_shadows_the_old_one_and_keeps_its_writes() -> None:
    head, segments = _thread(10)
    head.put_writes("", _id(2), "task", "~0", [(0, "a", ("json", b"1"))], segments.fetch)
    head.put("", _id(2), ("msgpack", b"again"), META, None, {"a": version_key(2)}, {}, segments.fetch)
    chain = list(head.newest_first(segments.fetch))
    assert [s.checkpoint_id for s in chain] == [_id(n) for n in range(10, 0, -1)]
    again = head.find("", _id(2), segments.fetch)
    assert again.checkpoint == ("msgpack", b"again") and [w[1] for w in again.sorted_writes()] == ["a"]
    assert again.refs == {"a": inline_ref(("json", b"2"))}  # its value, found in the segment that holds it


def test_checkpoints_come_back_newest_first_whatever_order_they_were_stored_in() -> None:
    head, segments = ThreadHead("t", seal_after=3), Segments()
    order = [5, 1, 9, 2, 8, 3, 7, 4, 6, 10]
    for n in order:
        if head.seal_due:
            head.sealed_into(segments.upload(head.segment()))
        head.put("ns" if n % 2 else "", _id(n), CP, META, None, {}, {}, segments.fetch)
    assert [s.checkpoint_id for s in head.newest_first(segments.fetch)] == [_id(n) for n in range(10, 0, -1)]
    assert [s.checkpoint_id for s in head.newest_first(segments.fetch, "")] == [_id(n) for n in (10, 8, 6, 4, 2)]
    assert head.find("ns", None, segments.fetch).checkpoint_id == _id(9)
    assert [s.checkpoint_id for s in head.newest_first(segments.fetch, before=_id(4))] == [_id(3), _id(2), _id(1)]


def test_a_copy_leaves_the_original_as_it_was() -> None:
    original, segments = _thread(6)
    before = json.dumps(original.to_json())
    copy = _put(_put(original.copy_as("u"), segments, 7), segments, 8)
    copy.put_writes("", _id(8), "task", "~0", [(0, "a", ("json", b"x"))], segments.fetch)
    assert json.dumps(original.to_json()) == before
    assert copy.find("", None, segments.fetch).checkpoint_id == _id(8)
    assert original.find("", None, segments.fetch).checkpoint_id == _id(6)


def test_rebuild_keeps_what_it_is_given_in_a_new_chain() -> None:
    head, segments = _thread(10)
    kept = [s for s in head.newest_first(segments.fetch) if int(s.checkpoint_id) % 3 == 0]
    rebuilt = rebuild("t", reversed(kept), segments.upload, seal_after=2)
    assert [s.checkpoint_id for s in rebuilt.newest_first(segments.fetch)] == [_id(9), _id(6), _id(3)]
    assert rebuilt.find("", _id(3), segments.fetch).refs == kept[-1].refs


def test_a_thread_of_the_first_format_is_read_as_it_was_written() -> None:
    v1 = {"thread_id": "t",
          "checkpoints": {"": {"1": {"c": ["msgpack", "Y3A="], "m": ["msgpack", "bWV0YQ=="], "p": None,
                                     "v": {"a": "1"}},
                               "2": {"c": ["msgpack", "Y3A="], "m": ["msgpack", "bWV0YQ=="], "p": "1",
                                     "v": {"a": "2"}}}},
          "values": {"": {"a": {"1": "file:///a1", "2": "file:///a2"}}},
          "writes": {"": {"2": [["task", 0, "a", ["json", "Mw=="], "~0"]]}}}
    head = ThreadHead.from_json(v1)
    chain = list(head.newest_first(Segments().fetch))
    assert [(s.checkpoint_id, s.parent_id, s.refs) for s in chain] == [
        ("2", "1", {"a": uri_ref("file:///a2")}), ("1", None, {"a": uri_ref("file:///a1")})]
    assert chain[0].sorted_writes() == [("task", "a", ("json", b"3"))] and chain[0].checkpoint == CP


def test_a_head_of_an_unknown_format_is_refused_with_what_to_do() -> None:
    with pytest.raises(UnknownFormat, match="format 3.*upgrade raftpoint"):
        ThreadHead.from_json({"format": 3, "thread_id": "t"})


def test_versions_of_different_types_do_not_collide() -> None:
    assert version_key(1) != version_key("1")


_op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(["", "sub"]), st.integers(1, 30), st.integers(1, 5)),
    st.tuples(st.just("writes"), st.sampled_from(["", "sub"]), st.integers(1, 30), st.sampled_from([-1, 0, 1]),
              st.integers(0, 3)))


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=60), st.integers(1, 4))
def test_the_chain_reads_as_one_record_holding_everything_would(ops: list[tuple[Any, ...]], seal_after: int) -> None:
    """Against the plainest model: every checkpoint in one dict, writes merged in place."""
    head, segments = ThreadHead("t", seal_after=seal_after), Segments()
    model: dict[tuple[str, str], str] = {}  # (ns, id) -> version key of channel a
    model_writes: dict[tuple[str, str], list[Any]] = {}
    known = None  # the sealed chain's namespaces, learned a step at a time
    for op in ops:
        head = head.copy_as("t")
        if head.seal_due:
            head.sealed_into(segments.upload(head.segment()))
        if op[0] == "put":
            _, ns, n, version = op
            key = version_key(version)
            head.put(ns, _id(n), CP, META, None, {"a": key}, {"a": (key, uri_ref(f"file:///{ns}{version}"))},
                     segments.fetch)
            model[(ns, _id(n))] = key
            model_writes.setdefault((ns, _id(n)), [])
        elif (op[1], _id(op[2])) in model:  # LangGraph writes to checkpoints it stored
            _, ns, n, idx, value = op
            changed = merge_writes(model_writes[(ns, _id(n))], "task", "~0", [(idx, "c", ("json", bytes([value])))])
            assert head.put_writes(ns, _id(n), "task", "~0", [(idx, "c", ("json", bytes([value])))],
                                   segments.fetch) == changed
        known = sealed_namespaces(head, segments.fetch, known)
    assert known == sealed_namespaces(head, segments.fetch, None)
    assert {ns for ns in ("", "sub") if ns in head.tail_namespaces or (known and ns in known[1])} == {
        ns for ns, _ in model}

    def seen(stored: Any) -> tuple[Any, ...]:
        return stored.checkpoint_ns, stored.checkpoint_id, stored.refs, stored.sorted_writes()

    def expected(ns: str, cid: str) -> tuple[Any, ...]:
        refs = {"a": uri_ref(f"file:///{ns}{json.loads(model[(ns, cid)])}")}
        writes = StoredCheckpoint(ns, cid, CP, META, None, {}, {}, model_writes[(ns, cid)]).sorted_writes()
        return ns, cid, refs, writes

    everything = sorted(model, key=lambda k: (k[1], k[0]), reverse=True)
    assert [seen(s) for s in head.newest_first(segments.fetch)] == [expected(*k) for k in everything]
    for ns in ("", "sub"):
        mine = [k for k in everything if k[0] == ns]
        latest = head.find(ns, None, segments.fetch)
        assert (seen(latest) if latest else None) == (expected(*mine[0]) if mine else None)
        for n in (1, 15, 30):
            found = head.find(ns, _id(n), segments.fetch)
            assert (seen(found) if found else None) == (expected(ns, _id(n)) if (ns, _id(n)) in model else None)
        assert [s.checkpoint_id for s in head.newest_first(segments.fetch, ns, before=_id(15))] == [
            k[1] for k in mine if k[1] < _id(15)]


def test_a_tail_is_sealed_early_only_when_the_sealed_head_then_fits_its_budget() -> None:
    head, segments = _thread(3, seal_after=16)
    grown = _put(head, segments, 4)
    assert not head.seal_pays(grown, grown.encoded_size())  # it fits as it is
    budget = grown.encoded_size() - 1
    assert head.seal_pays(grown, budget)  # sealed first, the head with step 4 fits
    assert not head.seal_pays(grown, grown.encoded_size() - head.encoded_size())  # step 4 alone does not: no seal
    assert not ThreadHead("t").seal_pays(grown, 0)  # nothing to seal
