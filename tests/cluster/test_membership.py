"""Membership changes through `raftpoint members` and the AdminService RPCs: a real
node can be added and removed; changes that would break the cluster are refused."""
from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import (LocalCluster, NodeProcess, credentials_for, free_ports, wait_for)
from raftpoint.cli.main import main
from tests.support.cluster import FAST, Client
from tests.support.metrics import scrape
from tests.support.tls import cli_tls

pytestmark = pytest.mark.cluster


def membership(leader: NodeProcess, method: str, node: str, **fields: object) -> tuple[grpc.StatusCode, str]:
    """Call AddNode/RemoveNode on the leader: (status code, reason code metadata)."""
    with leader.channel() as channel:
        try:
            getattr(pb_grpc.AdminServiceStub(channel), method)(pb.MembershipRequest(node=node, **fields), timeout=40,
                                                              metadata=credentials_for(leader.grpc))
        except grpc.RpcError as exc:
            reason = dict(exc.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
            return exc.code(), reason
    return grpc.StatusCode.OK, ""


def log_events(cluster: LocalCluster, index: int, event: str) -> list[dict]:
    lines = (cluster.root / f"node{index}.log").read_text().splitlines()
    return [doc for line in lines if line.startswith("{") and (doc := json.loads(line)).get("event") == event]


def with_an_agent(cluster: LocalCluster) -> tuple[Client, NodeProcess]:
    """A client with group "g" and agent "a" registered, and the leader."""
    client = Client(cluster)
    client.create_group()
    client.register("a")
    return client, cluster.leader()


def still_serving(cluster: LocalCluster, client: Client, index: int) -> None:
    """A leader is known and a write commits."""
    cluster.leader()
    client.commit("a", index)


@pytest.mark.slow
def test_add_then_remove_a_member(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 4, settings=FAST).start_all(count=3) as cluster:
        client = Client(cluster)
        client.create_group()
        client.register("a")
        client.commit("a", 1)
        endpoints = ",".join(n.grpc for n in cluster.nodes[:3])
        new = cluster.start(3, members=[0, 1, 2, 3])
        wait_for(lambda: new.status(), "the new node's gRPC")
        assert main(["members", "add", new.raft, "--grpc", new.grpc, "--endpoints", endpoints,
                     "--token-file", str(cluster.token_file), *cli_tls(cluster)]) == 0
        client.commit("a", 2)
        digest = cluster.converged(60)
        assert new.status().content_digest == digest
        assert main(["members", "remove", new.raft, "--endpoints", endpoints, "--token-file", str(cluster.token_file), *cli_tls(cluster)]) == 0
        cluster.stop(3)
        client.commit("a", 3)  # the remaining three still form a majority
        assert client.checkpoints() == [1, 2, 3]
        wait_for(lambda: all(n.status() for n in cluster.nodes[:3]), "the three remaining nodes")
        leader = cluster.leader()
        for event, member in (("raft.member_added", new.raft), ("raft.member_removed", new.raft)):
            assert any(e["member"] == member for e in log_events(cluster, leader.index, event)), event
        # Counted by the node that served each call (the leader may have changed since).
        scrapes = [scrape(n.metrics) for n in cluster.nodes[:3]]
        for action in ("add", "remove"):
            key = f'raftpoint_membership_requests_total{{action="{action}",outcome="done"}}'
            assert sum(m.get(key, 0) for m in scrapes) == 1, action


@pytest.mark.slow
def test_adding_nodes_nobody_runs_is_refused_and_the_cluster_keeps_working(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3, settings=FAST).start_all() as cluster:
        client, leader = with_an_agent(cluster)
        ghosts = [f"127.0.0.1:{p}" for p in free_ports(3)]
        for i, ghost in enumerate(ghosts, 1):
            assert membership(leader, "AddNode", ghost, grpc=ghost) == (grpc.StatusCode.FAILED_PRECONDITION,
                                                                        "REASON_NODE_NOT_READY")
            still_serving(cluster, client, i)
        # A member of the cluster that is not waiting to join is refused the same way.
        follower = next(n for n in cluster.nodes if n is not leader)
        assert membership(leader, "AddNode", follower.raft)[0] == grpc.StatusCode.FAILED_PRECONDITION
        assert cluster.leader() is leader  # no election was forced
        refused = log_events(cluster, leader.index, "raft.membership_request")
        assert [e["member"] for e in refused if e["outcome"] == "NODE_NOT_READY"] == ghosts
        assert scrape(leader.metrics)['raftpoint_membership_requests_total{action="add",outcome="NODE_NOT_READY"}'] == 3
        assert not log_events(cluster, leader.index, "raft.member_added")
        # The election that made it leader was logged and counted too.
        won = log_events(cluster, leader.index, "raft.election_won")
        assert won and won[-1]["term"] == leader.status().term and won[-1]["voters"] == 3
        assert scrape(leader.metrics)['raftpoint_raft_events_total{kind="election_won"}'] >= 1


@pytest.mark.slow
def test_a_node_with_another_password_is_not_added(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 4, settings=FAST).start_all(count=3) as cluster:
        client, leader = with_an_agent(cluster)
        cluster.password = "another-password-entirely-0123456789"
        stranger = cluster.start(3, members=[0, 1, 2, 3])
        wait_for(lambda: stranger.status(), "the stranger's gRPC")
        assert membership(leader, "AddNode", stranger.raft, grpc=stranger.grpc) == (
            grpc.StatusCode.FAILED_PRECONDITION, "REASON_NODE_NOT_READY")
        reasons = [e["reason"] for e in log_events(cluster, leader.index, "raft.membership_request")]
        assert "password" in reasons[-1]
        still_serving(cluster, client, 1)


@pytest.mark.slow
def test_removing_below_three_voters_is_refused_unless_forced(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(tmp_path / "c", 3, settings=FAST).start_all() as cluster:
        client, leader = with_an_agent(cluster)
        followers = [n for n in cluster.nodes if n is not leader]
        for i, follower in enumerate(followers, 1):
            assert membership(leader, "RemoveNode", follower.raft) == (grpc.StatusCode.FAILED_PRECONDITION,
                                                                       "REASON_TOO_FEW_VOTERS")
            still_serving(cluster, client, i)
        assert scrape(leader.metrics)['raftpoint_membership_requests_total{action="remove",outcome="TOO_FEW_VOTERS"}'] == 2
        endpoints = ",".join(cluster.endpoints())
        assert main(["members", "remove", followers[0].raft, "--endpoints", endpoints,
                     "--token-file", str(cluster.token_file), *cli_tls(cluster)]) == 1
        assert "fewer than 3" in capsys.readouterr().err  # the CLI prints the refusal
        assert main(["members", "remove", followers[0].raft, "--force", "--endpoints", endpoints,
                     "--token-file", str(cluster.token_file), *cli_tls(cluster)]) == 0
        cluster.stop(followers[0].index)
        leader = cluster.leader()
        client.commit("a", 3)  # two voters, both live
        removed = wait_for(lambda: log_events(cluster, leader.index, "raft.member_removed"), "the removal logged")
        assert [e["member"] for e in removed] == [followers[0].raft]


@pytest.mark.slow
def test_a_removal_that_leaves_no_live_quorum_is_refused(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 5, settings=FAST).start_all() as cluster:
        client, leader = with_an_agent(cluster)
        down, live = [n for n in cluster.nodes if n is not leader][:2], [n for n in cluster.nodes if n is not leader][2:]
        for node in down:
            cluster.stop(node.index)
        wait_for(lambda: scrape(leader.metrics).get("raftpoint_raft_live_voters") == 3, "the leader to see 3 live")
        # 4 voters would be left with 2 of them live: no quorum of 3.
        assert membership(leader, "RemoveNode", live[0].raft) == (grpc.StatusCode.FAILED_PRECONDITION,
                                                                  "REASON_TOO_FEW_LIVE_VOTERS")
        still_serving(cluster, client, 1)
        # Removing a dead one leaves 4 voters, 3 live: allowed, and then the other dead one (3 voters, 3 live).
        for i, node in enumerate(down, 2):
            assert membership(leader, "RemoveNode", node.raft) == (grpc.StatusCode.OK, "")
            still_serving(cluster, client, i)
        wait_for(lambda: scrape(leader.metrics).get("raftpoint_raft_voters") == 3, "the voters gauge to say 3")


def test_removing_a_node_that_is_not_a_member_is_refused(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(tmp_path / "c", 3, settings=FAST).start_all() as cluster:
        cluster.leader()
        endpoints = ",".join(cluster.endpoints())
        assert main(["members", "remove", "127.0.0.1:1", "--endpoints", endpoints, "--token-file",
                     str(cluster.token_file), *cli_tls(cluster)]) == 1
        assert "members remove" in capsys.readouterr().err
