"""A real agent process killed between its blob write and its metadata commit.

The blob store then holds a blob no checkpoint references (garbage, not a gap) and
the restarted agent resumes from the last *committed* checkpoint. Run against the
in-process coordinator and against a real 3-node cluster.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from agent_client.blobs.store import MANIFESTS
from agent_client.connection import Connection
from chaos.tokens.agent import CRASH_ENV
from chaos.tokens.process import AgentDied, AgentProcess
from agent_client.testing import InProcessCoordinator
from coordinator import channels
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS


def crash_mid_checkpoint_then_resume(endpoints: list[str], tls: ClientTLS, tmp_path: Path,
                                     token: str | None = None) -> None:
    # The agent process finds the TLS settings in its environment, as a deployed agent does.
    with channels.environment(tls), Connection(endpoints, token=token) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg-crash", spec=pb.GroupSpec(
            group="g", mode=pb.CIC_BCS, lease_ttl_s=30)))
        agent = AgentProcess("a", group="g", endpoints=endpoints, blob_dir=tmp_path / "blobs",
                             log_dir=tmp_path / "logs", tokens=50, env={CRASH_ENV: "2"})
        try:
            assert agent.spawn().reply()["restore_kind"] == "cold start"
            assert agent.request("send", to="b")["envelope"]
            committed = agent.request("status")["tokens"]
            assert agent.request("checkpoint")["index"] == 1
            agent.request("send", to="b")
            with pytest.raises(AgentDied):
                agent.request("checkpoint")  # SIGKILLed after the blob write, before the commit
            assert agent.proc.returncode == -9
            manifests = {p.name for p in (tmp_path / "blobs" / MANIFESTS).iterdir()}
            registered = admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g")).checkpoints
            assert [c.index for c in registered] == [1] and len(manifests) == 2
            assert registered[0].blob_uri.rsplit("/", 1)[-1] in manifests  # the other one is unreferenced garbage

            ready = agent.spawn(env={CRASH_ENV: "0"}).reply()
            assert ready["index"] == 1 and ready["restore"] == "resume from checkpoint 1"
            assert ready["tokens"] == committed  # the second send died with the process
            assert agent.request("checkpoint")["index"] == 2  # and the agent carries on
        finally:
            agent.stop()


def test_crash_between_blob_write_and_commit_in_process(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator:
        crash_mid_checkpoint_then_resume([coordinator.address], coordinator.client_tls(), tmp_path)


@pytest.mark.slow
@pytest.mark.cluster
def test_crash_between_blob_write_and_commit_on_a_cluster(cluster, tmp_path: Path) -> None:
    crash_mid_checkpoint_then_resume(cluster.endpoints(), cluster.client_tls(), tmp_path, cluster.token)
