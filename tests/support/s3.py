"""The loopback S3 server fixtures: one SeaweedFS per test session (a few seconds to
start), a fresh bucket prefix per test, and a server of its own for a test that kills it."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from coordinator.harness.s3_server import S3Server, start_s3_server

FAST_FAILURE = "connect_timeout=1&request_timeout=5&retry_timeout=2&max_retries=3"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("s3") / "data")
    yield server
    server.stop()


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A blob store location of its own on the shared server, credentials in the env."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server.url(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def own_s3_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A server this test may kill or pause without disturbing the others."""
    server = start_s3_server(tmp_path / "s3")
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    yield server
    server.stop()
