"""One cluster per test module for tests that leave it intact.

Starting three processes and electing a leader costs ~1 s; tests that only write
and read share a cluster and keep apart by using their own group and agent names
(the test client derives request ids from them, so names must not repeat).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from coordinator.cli.local_cluster import LocalCluster
from tests.support.cluster import FAST, Client


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("shared") / "cluster"
    with LocalCluster(root, 3, settings=FAST).start_all() as c:
        c.leader()
        yield c


@pytest.fixture
def shared_client(shared_cluster: LocalCluster) -> Client:
    shared_cluster.leader()  # a test before may have moved leadership; wait until one is known
    return Client(shared_cluster)
