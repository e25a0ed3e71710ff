"""`raftpoint group list|show`, `raftpoint checkpoints` and `raftpoint savepoint`
against a running three-node cluster: tables by default, JSON with --json, and one
line and a non-zero exit for a refusal or a cluster that cannot be reached."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import LocalCluster
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import Client
from tests.support.tls import cli_tls

pytestmark = pytest.mark.cluster
Capture = pytest.CaptureFixture[str]


@pytest.fixture(scope="module")
def views(shared_cluster: LocalCluster) -> str:
    """Group "views" (bcs): x has checkpoints 1 and 2; y received, in its interval 2, a
    message x sent after its checkpoint 2, then checkpointed 2, so the recovery line
    takes y back to 1."""
    client = Client(shared_cluster)
    client.create_group("views")
    for agent in ("x", "y"):
        client.register(agent, group="views")
        client.commit(agent, 1, group="views")
    client.commit("x", 2, group="views")
    client.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
        request_id="dep-y-1", group="views", agent_id="y", token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
        records=[pb.DependencyRecord(sender="x", send_interval=3, receiver="y", receive_interval=2,
                                     message_id="m1")]))
    client.commit("y", 2, group="views")
    return "views"


@pytest.fixture
def where(shared_cluster: LocalCluster) -> list[str]:
    return ["--endpoints", ",".join(shared_cluster.endpoints()), *cli_tls(shared_cluster)]


def one_line_refusal(capsys: Capture, *words: str) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and not captured.out, captured
    assert all(w in err for w in words), err
    return err


def test_group_list_and_show(views: str, where: list[str], capsys: Capture) -> None:
    assert raftpoint(["group", "list", *where]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["GROUP", "MODE", "STATE"]
    assert any(r.split()[:5] == ["views", "bcs", "running", "0", "2"] for r in rows[1:]), rows
    assert raftpoint(["group", "list", "--json", *where]) == 0
    assert "views" in {g["spec"]["group"] for g in json.loads(capsys.readouterr().out)}

    assert raftpoint(["group", "show", views, *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("group views: mode bcs, running, stable epoch 0"), out
    assert out[1].split() == ["AGENT", "STATE", "INCARNATION", "LATEST", "LATEST", "STABLE", "RECOVERY", "LINE"]
    assert [r.split() for r in out[2:]] == [["x", "alive", "1", "2", "2", "2"], ["y", "alive", "1", "2", "2", "1"]]
    assert raftpoint(["group", "show", views, "--json", *where]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {t["agent_id"]: t["checkpoint_index"] for t in shown["recovery_line"]} == {"x": 2, "y": 1}
    assert [(a["agent_id"], a["state"]) for a in shown["agents"]] == [("x", "AGENT_ALIVE"), ("y", "AGENT_ALIVE")]
    assert [(c["agent_id"], c["index"]) for c in shown["latest_checkpoints"]] == [("x", 2), ("y", 2)]

    assert raftpoint(["group", "show", "nope", *where]) == 1
    one_line_refusal(capsys, "raftpoint group show:", "NOT_FOUND", "'nope' does not exist")
    assert raftpoint(["group", "show", "bad name", *where]) == 1
    one_line_refusal(capsys, "INVALID_ARGUMENT")


def test_group_show_draws_the_group(views: str, where: list[str], shared_cluster: LocalCluster, tmp_path: Path,
                                    capsys: Capture) -> None:
    svg_file, html_file = tmp_path / "views.svg", tmp_path / "views.html"
    assert raftpoint(["group", "show", views, "--svg", str(svg_file), "--html", str(html_file), *where]) == 0
    saved = Client(shared_cluster).call("AdminService", "ListSavepoints", pb.ListSavepointsRequest(group=views))
    cuts = {f"savepoint {s.name}": " ".join(f"{c.agent_id}:{c.index}" for c in s.checkpoints) for s in saved.savepoints}
    counts = f"2 agents, 4 checkpoints, 1 message, {len(cuts)} savepoint{'' if len(cuts) == 1 else 's'}"
    assert capsys.readouterr().out.splitlines() == [f"wrote the picture of group views to {svg_file} ({counts})",
                                                    f"wrote the picture of group views to {html_file} ({counts})"]
    root = ET.parse(svg_file).getroot()
    groups = {}
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        groups.setdefault(g.get("class", "").split()[0], []).append(g)
    assert [g.get("data-agent") for g in groups["lane"]] == ["x", "y"]
    assert sorted((g.get("data-agent"), g.get("data-index")) for g in groups["checkpoint"]) == [
        ("x", "1"), ("x", "2"), ("y", "1"), ("y", "2")]
    assert [(g.get("data-sender"), g.get("data-receiver")) for g in groups["message"]] == [("x", "y")]
    assert [g.get("data-cut") for g in groups["recovery-line"]] == ["x:2 y:1"]
    assert {g.get("data-name"): g.get("data-cut") for g in groups.get("savepoint", [])} == cuts
    assert svg_file.read_text().split("?>", 1)[1].strip() in html_file.read_text()
    assert svg_file.stat().st_mode & 0o777 == 0o644  # a page for others to open, not a private temporary file

    assert raftpoint(["group", "show", "nope", "--svg", str(tmp_path / "nope.svg"), *where]) == 1
    one_line_refusal(capsys, "raftpoint group show:", "NOT_FOUND")
    assert not (tmp_path / "nope.svg").exists()


def test_checkpoints(views: str, where: list[str], capsys: Capture) -> None:
    assert raftpoint(["checkpoints", views, *where]) == 0
    rows = [r.split() for r in capsys.readouterr().out.splitlines()]
    assert rows[0][:5] == ["AGENT", "INDEX", "KIND", "EPOCH", "STABLE"]
    assert [r[:5] for r in rows[1:]] == [["x", "1", "basic", "0", "yes"], ["x", "2", "basic", "0", "yes"],
                                         ["y", "1", "basic", "0", "yes"], ["y", "2", "basic", "0", "yes"]]
    assert raftpoint(["checkpoints", views, "--agent", "y", "--json", *where]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["agent_id"], c["index"], c["blob_uri"]) for c in listed] == [
        ("y", 1, "file:///blobs/y/1"), ("y", 2, "file:///blobs/y/2")]
    assert raftpoint(["checkpoints", views, "--agent", "zed", *where]) == 1
    one_line_refusal(capsys, "raftpoint checkpoints:", "NOT_FOUND", "'zed'")


def test_savepoint_create_list_delete(views: str, where: list[str], capsys: Capture) -> None:
    assert raftpoint(["savepoint", "create", views, "before-v2", "--label", "by=ops", *where]) == 0
    assert capsys.readouterr().out.strip() == "created savepoint before-v2 of group views: x:2 y:1"
    assert raftpoint(["savepoint", "create", views, "before-v2", *where]) == 1
    one_line_refusal(capsys, "ALREADY_EXISTS", "before-v2")
    assert raftpoint(["savepoint", "create", views, "raw", "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoints"] == [{"agent_id": "x", "index": 2},
                                                                   {"agent_id": "y", "index": 1}]
    assert raftpoint(["savepoint", "list", views, *where]) == 0
    rows = [r.split() for r in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["NAME", "CREATED", "EPOCH", "CHECKPOINTS", "LABELS"]
    assert [(r[0], r[-3:]) for r in rows[1:]] == [("before-v2", ["x:2", "y:1", "by=ops"]), ("raw", ["-", "x:2", "y:1"])]

    assert raftpoint(["savepoint", "delete", views, "raw", *where]) == 0
    assert capsys.readouterr().out.startswith("deleted savepoint raw of group views")
    assert raftpoint(["savepoint", "list", views, "--json", *where]) == 0
    assert [s["name"] for s in json.loads(capsys.readouterr().out)] == ["before-v2"]
    assert raftpoint(["savepoint", "delete", views, "raw", *where]) == 1
    one_line_refusal(capsys, "NOT_FOUND", "'raw'")
    assert raftpoint(["savepoint", "create", views, "x", "--label", "no-equals-sign", *where]) == 2
    one_line_refusal(capsys, "KEY=VALUE")


def test_a_cluster_that_cannot_be_reached_is_one_line(shared_cluster: LocalCluster, tmp_path: Path,
                                                      capsys: Capture) -> None:
    stranger = LocalCA.create(tmp_path / "other")
    endpoints = ",".join(shared_cluster.endpoints())
    for command in (["group", "list"], ["group", "show", "views"], ["checkpoints", "views"],
                    ["savepoint", "list", "views"]):
        assert raftpoint([*command, "--endpoints", endpoints, "--ca-file", str(stranger.ca_file)]) == 1
        one_line_refusal(capsys, "TLS handshake failed")
    assert raftpoint(["group", "list", "--endpoints", endpoints, "--ca-file", str(tmp_path / "missing.crt")]) == 2
    one_line_refusal(capsys, "missing.crt")
