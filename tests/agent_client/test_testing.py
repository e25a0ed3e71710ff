"""agent_client.testing: the real API in-process, for users' unit tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.connection import Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb


@pytest.mark.slow
def test_agents_checkpoint_message_and_recover_in_process(tmp_path: Path) -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        with AgentClient("g", "a", [coordinator.address], tmp_path, tls=coordinator.client_tls(), snapshot=lambda: b"a-state") as a, \
                AgentClient("g", "b", [coordinator.address], tmp_path, tls=coordinator.client_tls(), snapshot=lambda: b"b-state") as b:
            a.register()
            b.register()
            a.checkpoint()
            assert b.unwrap(a.wrap(b"m", to="b")) == b"m" and b.forced == 1
            with AgentClient("g", "a", [coordinator.address], tmp_path, tls=coordinator.client_tls(), snapshot=lambda: b"") as restarted:
                restarted.register()
                assert restarted.restore().state == b"a-state"
                with pytest.raises(Rejected, match="incarnation"):
                    a.checkpoint()  # the old incarnation is a zombie now

def test_running_the_testing_coordinator_loads_neither_raft_nor_lmdb() -> None:
    code = ("import sys, agent_client.testing, agent_client.agent; "
            "c = agent_client.testing.InProcessCoordinator().start(); c.stop(); "
            "bad = {'pysyncobj', 'lmdb'} & set(sys.modules); print(sorted(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_documented_entry_point_gives_a_working_coordinator() -> None:
    from agent_client import testing
    coordinator = testing.coordinator()
    assert type(coordinator) is testing.InProcessCoordinator
    with coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS)))
        assert admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group.spec.group == "g"


def test_without_the_server_installed_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_client import testing
    monkeypatch.setattr(testing, "entry_points", lambda **_: ())
    with pytest.raises(testing.ServerNotInstalled, match="pip install raftpoint"):
        testing.coordinator()
