"""A 3-node ChaosCluster per test (faults leave it changed) and a client behind its proxies."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from agent_client.connection import Connection
from chaos.controller import ChaosCluster
from chaos.history import History
from coordinator.harness.local_cluster import harness_access
from tests.support.cluster import FAST, Client
from tests.support.tls import clients_trust


class ProxiedClient(Client):
    """The test Client's requests, sent by agent_client's Connection to the proxied
    endpoints: it follows `raftpoint-leader` redirects and retries with the same request."""

    def __init__(self, endpoints: list[str], deadline: float = 20.0) -> None:
        access = harness_access(endpoints)
        self.connection = Connection(endpoints, deadline=deadline, rpc_timeout=2.0, token=access and access[0])

    def call(self, service: str, method: str, request: Any, *, retry: bool = True) -> Any:
        return self.connection.call(service, method, request, deadline=None if retry else 0.0)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "ProxiedClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[ChaosCluster]:
    with ChaosCluster(tmp_path / "cluster", 3, settings=FAST, seed=7, history=History()) as c, \
            clients_trust(c):  # clients made without settings (ProxiedClient) use its CA
        c.start_all()
        c.leader()
        yield c


@pytest.fixture
def proxied(chaos: ChaosCluster) -> Iterator[ProxiedClient]:
    client = ProxiedClient(chaos.endpoints())
    yield client
    client.close()
