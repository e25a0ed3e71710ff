"""`raftpoint group create|delete`: a group's life from the command line, against the real API."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.blobs.layout import MANIFESTS
from agent_client.blobstore import open_blob_store
from agent_client.testing import InProcessCoordinator
from raftpoint.cli.main import main as raftpoint
from tests.support.tls import cli_tls


def checkpointed_agent(coordinator: InProcessCoordinator, blobs: Path, tmp_path: Path) -> AgentClient:
    agent = AgentClient("team", "a", [coordinator.address], str(blobs), tls=coordinator.client_tls(),
                        snapshot=lambda: b"state", state_dir=tmp_path / "state", background=False,
                        inline_max_bytes=0)  # a blob, for the deletion to find
    agent.register()
    agent.checkpoint()
    return agent


def test_create_then_delete_once_the_agents_are_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blobs = tmp_path / "blobs"
    with InProcessCoordinator() as coordinator:
        where = ["--endpoints", coordinator.address, *cli_tls(coordinator)]
        assert raftpoint(["group", "create", "team", "--mode", "bcs", *where]) == 0
        assert raftpoint(["group", "create", "team", "--mode", "bcs", *where]) == 0  # the same spec again: fine
        assert capsys.readouterr().out.splitlines() == ["group team: mode bcs, lease TTL 10s"] * 2
        assert raftpoint(["group", "create", "team", "--mode", "hmnr", *where]) == 1
        assert "ALREADY_EXISTS" in capsys.readouterr().err

        agent = checkpointed_agent(coordinator, blobs, tmp_path)
        assert raftpoint(["group", "delete", "team", *where]) == 1  # its agent is alive
        err = capsys.readouterr().err
        assert "live agents" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        agent.close(deregister=True)

        assert raftpoint(["group", "delete", "team", "--blob-store", str(blobs), "--grace", "0", *where]) == 0
        out = capsys.readouterr().out
        assert "deleted group team" in out and "deleted 1 manifests" in out, out
        assert not list(open_blob_store(str(blobs)).backend.keys(MANIFESTS))
        assert raftpoint(["group", "delete", "team", *where]) == 1
        assert "does not exist" in capsys.readouterr().err
        # The name is free again.
        assert raftpoint(["group", "create", "team", "--mode", "hmnr", *where]) == 0


def test_without_a_blob_store_the_forgotten_checkpoints_are_listed(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    blobs = tmp_path / "blobs"
    with InProcessCoordinator() as coordinator:
        where = ["--endpoints", coordinator.address, *cli_tls(coordinator)]
        assert raftpoint(["group", "create", "team", "--mode", "bcs", *where]) == 0
        checkpointed_agent(coordinator, blobs, tmp_path).close(deregister=True)
        capsys.readouterr()
        assert raftpoint(["group", "delete", "team", *where]) == 0
        captured = capsys.readouterr()
        assert "deleted group team" in captured.out
        listed = [line.split("--uri ", 1)[1] for line in captured.err.splitlines() if "--uri " in line]
        assert len(listed) == 1 and listed[0].startswith("file://"), captured.err
        assert len(list(open_blob_store(str(blobs)).backend.keys(MANIFESTS))) == 1  # still there
