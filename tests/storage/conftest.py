"""Store factories shared by the storage tests."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from coordinator.storage import Store, open_store

KINDS = ("memory", "lmdb")
MakeStore = Callable[..., Store]


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[MakeStore]:
    """make_store(kind, **options) -> a new store in its own directory; all closed at the end."""
    made: list[Store] = []

    def make(kind: str, **options: object) -> Store:
        store = open_store(kind, tmp_path / f"{kind}{len(made)}", **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(kind: str, make_store: MakeStore) -> Store:
    return make_store(kind)
