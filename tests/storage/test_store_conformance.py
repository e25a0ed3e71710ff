"""One suite, both store implementations."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.storage import StoreFullError, keys, open_store
from coordinator.storage.lmdb_store import LmdbStore


@pytest.fixture(params=["memory", "lmdb"])
def store(request, tmp_path: Path) -> Iterator:
    s = open_store(request.param, tmp_path / "db")
    yield s
    s.close()


@pytest.fixture
def fresh(request, tmp_path: Path):
    made = []

    def make(kind: str):
        s = open_store(kind, tmp_path / f"fresh{len(made)}")
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def kind_of(store) -> str:
    return "lmdb" if isinstance(store, LmdbStore) else "memory"


def test_commit_get_delete_and_applied_index(store) -> None:
    assert store.applied_index == 0 and store.get(b"a") is None
    store.commit({b"a": b"1", b"b": b"2"}, 5)
    assert (store.get(b"a"), store.get(b"b"), store.applied_index) == (b"1", b"2", 5)
    store.commit({b"a": None, b"c": b"3"}, 6)
    assert store.get(b"a") is None and store.get(b"c") == b"3" and store.applied_index == 6


def test_applied_index_never_goes_back_and_refusal_changes_nothing(store) -> None:
    store.commit({b"a": b"1"}, 10)
    digest = store.digest()
    with pytest.raises(ValueError, match="backwards"):
        store.commit({b"a": b"2"}, 9)
    assert store.get(b"a") == b"1" and store.applied_index == 10 and store.digest() == digest


def test_scan_is_ordered_and_bounded_by_prefix(store) -> None:
    writes = {keys.key("c", "g", "a", i): str(i).encode() for i in (10, 2, 300, 1)}
    writes[keys.key("c", "g", "b", 1)] = b"other agent"
    writes[keys.key("d", "g")] = b"other table"
    store.commit(writes, 1)
    found = store.scan(keys.prefix("c", "g", "a"))
    assert [keys.parse(k)[1][-1] for k, _ in found] == [1, 2, 10, 300]
    assert store.scan(keys.prefix("z")) == []


def test_digest_depends_on_content_only(store, fresh) -> None:
    store.commit({b"x": b"1", b"y": b"2"}, 3)
    other = fresh(kind_of(store))
    other.commit({b"y": b"2"}, 1)
    other.commit({b"z": b"9"}, 2)
    other.commit({b"x": b"1", b"z": None}, 50)
    assert other.digest() == store.digest()  # same content, other history and applied index
    other.commit({b"x": b"2"}, 51)
    assert other.digest() != store.digest()
    only_y = fresh(kind_of(store))
    only_y.commit({b"y": b"2"}, 1)
    assert store.digest(skip=b"x") == only_y.digest() != store.digest()


def test_image_round_trip_at_an_offset(store, fresh) -> None:
    store.commit({keys.key("g", f"n{i}"): b"v" * i for i in range(200)}, 77)
    buf = io.BytesIO()
    buf.write(b"header!")
    length = store.write_image(buf)
    assert length > 0 and buf.tell() == 7 + length
    buf.seek(7)
    copy = fresh(kind_of(store))
    copy.commit({b"stale": b"gone after load"}, 3)
    copy.load_image(buf, length)
    assert copy.digest() == store.digest() and copy.applied_index == 77 and copy.get(b"stale") is None


def test_stats(store) -> None:
    store.commit({b"k%d" % i: b"v" for i in range(10)}, 1)
    stats = store.stats()
    assert stats["entries"] == 10 and stats["used_bytes"] > 0 and stats["capacity_bytes"] >= 0


def test_keys_reject_nul_and_round_trip() -> None:
    with pytest.raises(ValueError):
        keys.key("t", "a\x00b")
    assert keys.parse(keys.key("c", "g", "a", 7)) == ("c", ("g", "a", 7))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="ab:.-z0", min_size=1, max_size=6), st.integers(0, 2**40)),
                min_size=2, max_size=20))
def test_key_order_is_tuple_order(parts) -> None:
    encoded = sorted(parts, key=lambda p: keys.key("t", *p))
    assert encoded == sorted(parts)


def test_lmdb_survives_reopen(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db")
    s.commit({b"a": b"1"}, 4)
    digest = s.digest()
    s.close()
    again = LmdbStore(tmp_path / "db")
    assert again.applied_index == 4 and again.digest() == digest
    again.close()


def test_lmdb_grows_then_refuses_cleanly_when_full(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=256 * 1024, max_map_size=1024 * 1024)
    s.commit({b"k%d" % i: b"v" * 1000 for i in range(400)}, 1)  # needs growth past 256 KiB
    assert s.get(b"k399") == b"v" * 1000
    digest, applied = s.digest(), s.applied_index
    with pytest.raises(StoreFullError, match="max_map_size_mb"):
        s.commit({b"big%d" % i: b"x" * 4000 for i in range(1000)}, 2)
    assert s.digest() == digest and s.applied_index == applied
    s.close()


@pytest.mark.parametrize("leftover", ["incoming_only", "old_only", "both_with_path"])
def test_lmdb_recovers_from_an_interrupted_image_swap(tmp_path: Path, leftover: str) -> None:
    path = tmp_path / "db"
    src = LmdbStore(tmp_path / "src")
    src.commit({b"new": b"1"}, 9)
    buf = io.BytesIO()
    length = src.write_image(buf)
    src.close()
    old = LmdbStore(path)
    old.commit({b"old": b"1"}, 3)
    old.close()
    incoming = tmp_path / "db.incoming"
    incoming.mkdir()
    (incoming / "data.mdb").write_bytes(buf.getvalue()[:length])
    if leftover == "incoming_only":   # crashed after renaming db -> db.old and removing it
        import shutil
        shutil.rmtree(path)
    elif leftover == "old_only":      # crashed between the two renames, incoming lost
        path.rename(tmp_path / "db.old")
        import shutil
        shutil.rmtree(incoming)
    else:                             # crashed before the first rename
        pass
    store = LmdbStore(path)
    expected = {"incoming_only": (b"new", 9), "old_only": (b"old", 3), "both_with_path": (b"old", 3)}[leftover]
    assert store.get(expected[0]) == b"1" and store.applied_index == expected[1]
    assert not incoming.exists() and not (tmp_path / "db.old").exists()
    store.close()


def test_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="memory, lmdb"):
        open_store("redis", None)
