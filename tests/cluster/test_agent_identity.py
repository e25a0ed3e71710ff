"""An agent of its own on a `raftpoint cluster up` cluster: `raftpoint auth add-agent`
makes the identity, and the README's section on it runs as written."""
from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from agent_client.connection import Connection, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS
from coordinator.harness.local_cluster import LocalCluster
from coordinator.transport.auth import parse_bindings
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import FAST
from tests.support.readme import CONNECT_AN_AGENT, README_DATA_DIR, fenced, readme_section, shell_commands

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def reporter_tls(root: Path) -> ClientTLS:
    tls = root / "tls"
    return ClientTLS(str(tls / "ca.crt"), str(tls / "client-reporter.crt"), str(tls / "client-reporter.key"))


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "data", 1, settings=FAST).start_all() as running:
        running.leader()
        yield running


def test_the_readme_section_runs_as_written_and_the_agent_may_do_no_more(cluster: LocalCluster,
                                                                        tmp_path: Path) -> None:
    section = readme_section(CONNECT_AN_AGENT)
    for argv in shell_commands(section):
        argv = [str(cluster.root) if word == README_DATA_DIR else word for word in argv]
        assert argv[0] == "raftpoint" and raftpoint(argv[1:]) == 0, argv
    code = fenced(section, "python")
    assert f'data = "{README_DATA_DIR}"' in code
    done = subprocess.run([sys.executable, "-c", code.replace(f'data = "{README_DATA_DIR}"', f"data = {str(cluster.root)!r}")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "{'pages': 1}", done.stdout + done.stderr

    with Connection(cluster.endpoints(), tls=reporter_tls(cluster.root), deadline=10) as reporter:
        with pytest.raises(Rejected) as refused:
            reporter.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                request_id="cg-other", spec=pb.GroupSpec(group="other", mode=pb.CIC_BCS)))
        assert refused.value.reason_code == pb.REASON_ROLE_FORBIDS
    with Connection(cluster.endpoints(), tls=cluster.client_tls(), deadline=10) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg-other", spec=pb.GroupSpec(group="other", mode=pb.CIC_BCS)))
    with Connection(cluster.endpoints(), tls=reporter_tls(cluster.root), deadline=10) as reporter:
        with pytest.raises(Rejected) as refused:
            reporter.call("AgentService", "Register", pb.RegisterRequest(
                request_id="reg-x", group="other", agent_id="x", secret=b"s" * 16))
        assert refused.value.reason_code == pb.REASON_FOREIGN_AGENT


def test_add_agent_is_idempotent_and_refuses_to_rebind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    LocalCluster(root, 1)  # its CA and auth files, as `cluster up` leaves them; no node is started
    add = ["auth", "add-agent", "reporter", "--group", "team", "--data-dir", str(root)]
    assert raftpoint(add) == 0
    cert = (root / "tls" / "client-reporter.crt").read_bytes()
    assert raftpoint(add) == 0 and (root / "tls" / "client-reporter.crt").read_bytes() == cert
    bindings = parse_bindings((root / "auth" / "bindings.toml").read_text())
    assert bindings["cert:reporter"].group == "team" and bindings["cert:reporter"].pattern == "*"
    capsys.readouterr()
    assert raftpoint([*add[:4], "elsewhere", *add[5:]]) == 1
    assert "[cert:reporter] is bound already" in capsys.readouterr().err
    assert raftpoint(["auth", "add-agent", "admin", "--group", "team", "--data-dir", str(root)]) == 2
    assert "admin certificate" in capsys.readouterr().err
    assert raftpoint(["auth", "add-agent", "x", "--group", "team", "--data-dir", str(tmp_path / "none")]) == 2
    assert "holds no cluster" in capsys.readouterr().err
    assert parse_bindings((root / "auth" / "bindings.toml").read_text()) == bindings


@pytest.mark.slow
def test_the_quickstart_runs_again_and_again_on_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    """Each run a group of its own: a second run in the first one's group would restore
    checkpoints whose blobs went with the first run's temporary directory. Given
    endpoints (TLS from the environment) twice, then the data dir."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAFTPOINT_")}
    env.update(cluster.client_tls().environment())
    groups = []
    for run, where in enumerate([",".join(cluster.endpoints())] * 2 + [str(cluster.root)], 1):
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), where],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert done.returncode == 0, f"run {run}: {done.stdout}{done.stderr}"
        assert done.stdout.strip() == "{'notes': ['outline the report']}", f"run {run}: {done.stdout}{done.stderr}"
        groups += re.findall(r"raftpoint group delete (quickstart-[0-9a-f]{8})", done.stderr)
    assert len(set(groups)) == 3, groups


def test_the_quickstart_as_an_agent_identity_names_the_command_that_makes_what_it_lacks(
        cluster: LocalCluster) -> None:
    """First its certificate is missing, then its group: one line each, naming the
    `raftpoint` command that makes it, and nothing is created."""
    quickstart = runpy.run_path(str(ROOT / "examples" / "quickstart.py"))
    data = str(cluster.root)
    argv = [data, "--identity", "reporter", "--group", "team"]
    with pytest.raises(SystemExit) as no_certificate:
        quickstart["main"](argv)
    assert raftpoint(["auth", "add-agent", "reporter", "--group", "team", "--data-dir", data]) == 0
    with pytest.raises(SystemExit) as no_group:
        quickstart["main"](argv)
    said = [str(no_certificate.value.code), str(no_group.value.code)]
    assert f"`raftpoint auth add-agent reporter --group team --data-dir {data}` issues them" in said[0], said
    assert f"`raftpoint group create team --mode bcs --data-dir {data}` creates it" in said[1], said
    assert all(line.startswith("quickstart: ") and "\n" not in line for line in said), said
    assert not (cluster.root / "agents").exists()
