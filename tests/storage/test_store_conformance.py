"""One conformance suite, run against every store kind (fixtures in conftest.py)."""
from __future__ import annotations

import io
import tempfile
import threading
from pathlib import Path
from typing import Callable, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.storage import ImageError, Store, keys, open_store
from coordinator.storage.protocol import MAX_KEY_SIZE
from tests.storage.conftest import KINDS, MakeStore

T = TypeVar("T")


def content(store: Store) -> list[tuple[bytes, bytes]]:
    return store.scan(b"")


# ---- get / commit / delete / applied_index ----------------------------------------------
def test_a_new_store_is_empty(store: Store) -> None:
    assert store.applied_index == 0 and store.get(b"a") is None and content(store) == []
    assert store.stats()["entries"] == 0


def test_commit_puts_overwrites_and_deletes(store: Store) -> None:
    store.commit({b"a": b"1", b"b": b"2"}, 5)
    assert (store.get(b"a"), store.get(b"b"), store.applied_index) == (b"1", b"2", 5)
    store.commit({b"a": None, b"b": b"22", b"c": b"", b"never": None}, 6)
    assert store.get(b"a") is None and store.get(b"never") is None
    assert content(store) == [(b"b", b"22"), (b"c", b"")]  # an empty value is a value
    assert store.applied_index == 6


def test_applied_index_may_repeat_but_never_go_back(store: Store) -> None:
    store.commit({b"a": b"1"}, 10)
    store.commit({b"b": b"1"}, 10)
    digest = store.digest()
    with pytest.raises(ValueError, match="backwards"):
        store.commit({b"a": b"2", b"z": b"new"}, 9)
    assert store.get(b"a") == b"1" and store.get(b"z") is None
    assert store.applied_index == 10 and store.digest() == digest


@pytest.mark.parametrize("bad, error", [
    ({b"ok": b"1", b"bad": "text"}, TypeError),          # a str value, after a good write
    ({b"ok": b"1", "bad": b"1"}, TypeError),             # a str key
    ({b"ok": b"1", b"": b"1"}, ValueError),              # LMDB refuses empty keys
    ({b"ok": b"1", b"k" * (MAX_KEY_SIZE + 1): b"1"}, ValueError),
])
def test_a_bad_write_refuses_the_whole_batch(store: Store, bad: dict, error: type) -> None:
    store.commit({b"ok": b"0"}, 1)
    with pytest.raises(error):
        store.commit(bad, 2)
    assert content(store) == [(b"ok", b"0")] and store.applied_index == 1


def test_longest_key_is_accepted(store: Store) -> None:
    store.commit({b"k" * MAX_KEY_SIZE: b"1"}, 1)
    assert store.get(b"k" * MAX_KEY_SIZE) == b"1"


# ---- scan ---------------------------------------------------------------------------------
def test_scan_is_ordered_and_bounded_by_prefix(store: Store) -> None:
    writes = {keys.key("c", "g", "a", i): str(i).encode() for i in (10, 2, 300, 1)}
    writes[keys.key("c", "g", "ab", 1)] = b"agent ab is not agent a"
    writes[keys.key("d", "g")] = b"other table"
    store.commit(writes, 1)
    found = store.scan(keys.prefix("c", "g", "a"))
    assert [keys.parse(k)[1][-1] for k, _ in found] == [1, 2, 10, 300]
    assert found[0][1] == b"1"
    assert store.scan(keys.prefix("z")) == []


def test_scan_start_and_limit(store: Store) -> None:
    store.commit({b"p%d" % i: b"%d" % i for i in range(10)} | {b"q0": b"x", b"o9": b"x"}, 1)
    assert [k for k, _ in store.scan(b"p", start=b"p5")] == [b"p5", b"p6", b"p7", b"p8", b"p9"]
    assert [k for k, _ in store.scan(b"p", start=b"p45")] == [b"p5", b"p6", b"p7", b"p8", b"p9"]
    assert [k for k, _ in store.scan(b"p", start=b"a")] == [b"p%d" % i for i in range(10)]
    assert store.scan(b"p", start=b"q") == []
    assert [k for k, _ in store.scan(b"p", limit=3)] == [b"p0", b"p1", b"p2"]
    assert [k for k, _ in store.scan(b"p", start=b"p8", limit=5)] == [b"p8", b"p9"]
    assert store.scan(b"p", limit=0) == []
    with pytest.raises(ValueError):
        store.scan(b"p", limit=-1)


_keys = st.lists(st.sampled_from([b"a", b"b", b"\x00", b"\xff"]), min_size=1, max_size=4).map(b"".join)
_batches = st.lists(st.dictionaries(_keys, st.none() | st.binary(max_size=3), max_size=6), min_size=1, max_size=6)
_queries = st.lists(st.tuples(st.sampled_from([b"", b"a", b"b", b"a\x00", b"\xff"]),
                              st.none() | _keys, st.none() | st.integers(0, 5)), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=_batches, queries=_queries)
def test_every_kind_matches_a_dict_model(batches: list[dict], queries: list[tuple]) -> None:
    """Random histories against a plain dict: get, scan(prefix, start, limit), digest."""
    model: dict[bytes, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = [open_store(kind, Path(tmp) / kind) for kind in KINDS]
        try:
            for index, batch in enumerate(batches, start=1):
                for s in stores:
                    s.commit(batch, index)
                for k, v in batch.items():
                    if v is None:
                        model.pop(k, None)
                    else:
                        model[k] = v
            for prefix, start, limit in queries:
                expected = [(k, model[k]) for k in sorted(model)
                            if k.startswith(prefix) and (start is None or k >= start)][:limit]
                for s in stores:
                    assert s.scan(prefix, start, limit) == expected
            for s in stores:
                assert all(s.get(k) == v for k, v in model.items())
                assert s.applied_index == len(batches) and s.stats()["entries"] == len(model)
            assert len({s.digest() for s in stores}) == 1  # both kinds hash identically
        finally:
            for s in stores:
                s.close()


# ---- digest -------------------------------------------------------------------------------
def test_digest_depends_on_content_only(store: Store, kind: str, make_store: MakeStore) -> None:
    store.commit({b"x": b"1", b"y": b"2"}, 3)
    other = make_store(kind)
    other.commit({b"y": b"2"}, 1)
    other.commit({b"z": b"9"}, 2)
    other.commit({b"x": b"1", b"z": None}, 50)
    assert other.digest() == store.digest()  # same content, other order, history and applied index
    other.commit({}, 51)
    assert other.digest() == store.digest()  # applied_index is not part of it
    other.commit({b"x": b"2"}, 52)
    assert other.digest() != store.digest()


def test_digest_is_length_prefixed(kind: str, make_store: MakeStore) -> None:
    a, b = make_store(kind), make_store(kind)
    a.commit({b"ab": b"c"}, 1)
    b.commit({b"a": b"bc"}, 1)
    assert a.digest() != b.digest() != make_store(kind).digest()


def test_digest_skip_leaves_out_a_prefix(store: Store, kind: str, make_store: MakeStore) -> None:
    store.commit({b"r1": b"result", b"x": b"1"}, 1)
    only_x = make_store(kind)
    only_x.commit({b"x": b"1"}, 1)
    assert store.digest(skip=b"r") == only_x.digest() != store.digest()


_TOKEN_STATES = [{b"left": b"t", b"n": b"%d" % i} if i % 2 else {b"right": b"t", b"n": b"%d" % i}
                 for i in range(60)]


def _read_while_committing(store: Store, read: Callable[[], T]) -> list[T]:
    """Commit _TOKEN_STATES[i] at index i + 1 (each commit moves a token between two
    keys) while another thread calls `read` as fast as it can; returns what it read."""
    store.commit(_TOKEN_STATES[0], 1)
    seen: list[T] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(read())
            store.stats()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(1, len(_TOKEN_STATES)):
            gone = b"right" if i % 2 else b"left"
            store.commit({gone: None} | _TOKEN_STATES[i], i + 1)
    finally:
        done.set()
        thread.join()
    return seen


def _reference_digests(make_store: MakeStore) -> dict[int, str]:
    """Applied index -> the digest of the content committed at it."""
    out = {}
    for i, state in enumerate(_TOKEN_STATES):
        reference = make_store("memory")
        reference.commit(state, 1)
        out[i + 1] = reference.digest()
    return out


def test_digest_from_another_thread_sees_whole_commits_only(store: Store, make_store: MakeStore) -> None:
    """A reader must never see both tokens or neither."""
    valid = set(_reference_digests(make_store).values())
    seen = _read_while_committing(store, store.digest)
    assert seen and set(seen) <= valid


def test_digest_with_index_pairs_each_index_with_its_own_content(store: Store, make_store: MakeStore) -> None:
    """Status samples compare replicas by (index, digest): a pair mixing two commits
    would report a divergence that is not there, or hide one that is."""
    reference = _reference_digests(make_store)
    seen = _read_while_committing(store, store.digest_with_index)
    assert seen and all(reference[index] == digest for index, digest in seen)
    assert store.digest_with_index() == (len(_TOKEN_STATES), store.digest())
    assert store.digest_with_index(skip=b"n") == (len(_TOKEN_STATES), store.digest(skip=b"n"))


# ---- images -------------------------------------------------------------------------------
def _filled(store: Store) -> Store:
    store.commit({keys.key("g", f"n{i}"): b"v" * i for i in range(300)}, 77)
    store.commit({keys.key("g", "n5"): None}, 78)
    return store


@pytest.mark.parametrize("medium", ["bytesio", "file"])
@pytest.mark.parametrize("offset", [0, 7])
def test_image_round_trip(store: Store, kind: str, make_store: MakeStore, tmp_path: Path,
                          medium: str, offset: int) -> None:
    _filled(store)
    with (io.BytesIO() if medium == "bytesio" else open(tmp_path / "image", "w+b")) as f:
        f.write(b"H" * offset)
        length = store.write_image(f)
        f.write(b"trailer")  # the caller may append more after the image
        assert length > 0 and f.tell() == offset + length + len(b"trailer")
        f.seek(0)
        assert f.read(offset) == b"H" * offset
        copy = make_store(kind)
        copy.commit({b"stale": b"gone after load"}, 300)  # even a store that is ahead
        copy.load_image(f, length)
        assert f.read() == b"trailer"  # exactly `length` bytes were consumed
    assert copy.digest() == store.digest() and copy.applied_index == 78
    assert copy.get(b"stale") is None and copy.stats()["entries"] == 299
    copy.commit({b"after": b"load"}, 79)  # and the store keeps working
    assert copy.get(b"after") == b"load"


def _image(store: Store) -> bytes:
    buf = io.BytesIO()
    store.write_image(buf)
    return buf.getvalue()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_bad_image_is_refused_and_changes_nothing(store: Store, kind: str, make_store: MakeStore,
                                                    damage: str) -> None:
    image = _image(_filled(make_store(kind)))
    bad = {"truncated": image[:len(image) // 2], "garbage": b"\x42" * len(image), "empty": b""}[damage]
    store.commit({b"mine": b"1"}, 3)
    digest = store.digest()
    with pytest.raises(ImageError):
        store.load_image(io.BytesIO(bad), len(bad))
    with pytest.raises(ImageError):  # the stream ends before `length`
        store.load_image(io.BytesIO(image[:-1]), len(image))
    assert store.digest() == digest and store.applied_index == 3


# ---- stats --------------------------------------------------------------------------------
def test_stats(store: Store, kind: str) -> None:
    empty_used = store.stats()["used_bytes"]
    store.commit({b"k%d" % i: b"v" * 100 for i in range(100)}, 1)
    stats = store.stats()
    assert stats["entries"] == 100 and stats["used_bytes"] >= 100 * 100 and stats["used_bytes"] > empty_used
    assert stats["capacity_bytes"] == (0 if kind == "memory" else 64 << 30)
    store.commit({b"k%d" % i: None for i in range(100)}, 2)
    assert store.stats()["entries"] == 0 and store.stats()["used_bytes"] < stats["used_bytes"]


def test_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="memory, lmdb"):
        open_store("redis", None)


def test_lmdb_needs_a_path() -> None:
    with pytest.raises(ValueError, match="path"):
        open_store("lmdb", None)
