"""The client's keepalive names replaced `heartbeat` ones; the old public names still
work, each with a DeprecationWarning that points at the caller's line."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.aio import AsyncAgentClient
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS

UNREACHABLE = ["127.0.0.1:1"]  # never dialled: no test here makes a call


def client(tmp_path: Path, **options: object) -> AgentClient:
    return AgentClient("g", "a", UNREACHABLE, tmp_path / "blobs", tls=ClientTLS.plaintext(), snapshot=dict,
                       background=False, **options)


def test_heartbeat_interval_still_sets_the_keepalive_interval_and_warns(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="keepalive_interval=") as caught:
        old = client(tmp_path, heartbeat_interval=0.7)
    try:
        assert old.keepalive_every() == 0.7
        assert caught[0].filename == __file__, f"the warning points at {caught[0].filename}, not the caller"
    finally:
        old.close()


def test_both_interval_keywords_at_once_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="keepalive_interval= only"):
        client(tmp_path, keepalive_interval=1.0, heartbeat_interval=2.0)


def test_heartbeat_still_sends_a_keepalive_and_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = pb.HeartbeatResponse(current_epoch=4)
    blocking = client(tmp_path, keepalive_interval=0.7)
    monkeypatch.setattr(blocking, "keepalive", lambda: answer)
    try:
        with pytest.warns(DeprecationWarning, match=r"keepalive\(\)"):
            assert blocking.heartbeat() is answer
    finally:
        blocking.close()


def test_the_asyncio_clients_heartbeat_still_sends_a_keepalive_and_warns(tmp_path: Path) -> None:
    answer = pb.HeartbeatResponse(current_epoch=4)

    async def keepalive() -> pb.HeartbeatResponse:
        return answer

    async def run() -> pb.HeartbeatResponse:
        aio = AsyncAgentClient("g", "a", UNREACHABLE, tmp_path / "blobs", tls=ClientTLS.plaintext(), snapshot=dict,
                               background=False)
        aio.keepalive = keepalive  # type: ignore[method-assign]
        try:
            with pytest.warns(DeprecationWarning, match=r"keepalive\(\)"):
                return await aio.heartbeat()
        finally:
            await aio.close()

    assert asyncio.run(run()) is answer
