"""ChaosCluster on a real 3-node cluster: every fault, what Raft makes of it, and recovery.

Each test gets a fresh cluster (FAST timeouts: election 0.4-0.8 s, leader fallback 1 s)
and finishes well within 30 s on a quiet machine; every wait has a deadline.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest

from agent_client.connection import LEADER_METADATA_KEY, CoordinatorUnavailable
from chaos.controller import ChaosCluster
from chaos.history import NEMESIS
from chaos.linkfaults import Partition
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import credentials_for, wait_for
from tests.chaos_suite.conftest import ProxiedClient
from tests.support.cluster import FAST
from tests.support.tls import clients_trust

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.slow]


def others(chaos: ChaosCluster, i: int) -> list[int]:
    return [j for j in range(chaos.size) if j != i]


@pytest.mark.parametrize("mode", [Partition.RESET, Partition.BLACKHOLE])
def test_partitioned_leader_is_replaced_and_acknowledges_nothing(chaos: ChaosCluster, proxied: ProxiedClient,
                                                                mode: Partition) -> None:
    proxied.create_group()
    proxied.register("a")
    acked = [i for i in range(1, 6) if proxied.commit("a", i)]
    old = chaos.leader()
    applied_before = chaos.statuses()[old].applied_index
    chaos.network.partition([[old]], mode)
    cut_at = time.monotonic()

    stale: list[object] = []  # a write sent to the cut-off leader while it may still believe it leads

    def write_to_old_leader() -> None:
        with ProxiedClient([chaos.endpoints()[old]], deadline=4.0) as client:
            try:
                stale.append(client.commit("a", 100, rid="cp-stale"))
            except CoordinatorUnavailable as exc:
                stale.append(exc)

    writer = threading.Thread(target=write_to_old_leader)
    writer.start()
    wait_for(lambda: chaos.statuses()[old].role != "leader", "the old leader to step down", timeout=10)
    believed = time.monotonic() - cut_at
    new = chaos.leader(timeout=10, among=others(chaos, old))
    more = [i for i in range(6, 11) if proxied.commit("a", i)]  # through the majority's leader
    writer.join(10)
    assert not writer.is_alive() and isinstance(stale[0], CoordinatorUnavailable), stale
    assert chaos.statuses()[old].applied_index == applied_before  # nothing applied while cut off
    assert believed < 1.0 + 3.0, believed  # leader_fallback_timeout plus scheduling slack

    chaos.network.heal()
    digest = chaos.converged(15)
    assert chaos.statuses()[old].content_digest == digest
    assert proxied.checkpoints() == acked + more  # index 100 was never applied anywhere
    assert new != old
    assert [op.f for op in chaos.history.ops if op.process == NEMESIS] == ["start-all", "partition", "heal"]


def test_a_write_waiting_on_a_deposed_leader_is_answered_when_it_steps_down(chaos: ChaosCluster,
                                                                         proxied: ProxiedClient) -> None:
    """Without an answer on step-down, pysyncobj holds the proposal until an entry at its
    index applies there -- after the partition heals -- and the caller waits out its deadline."""
    proxied.create_group()
    proxied.register("a")
    proxied.commit("a", 1)
    old = chaos.leader()
    chaos.network.partition([[old]], Partition.BLACKHOLE)
    started = time.monotonic()
    request = pb.CommitCheckpointRequest(
        request_id="cp-unknown", token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
        checkpoint=pb.CheckpointMeta(group="g", agent_id="a", index=2, kind=pb.BASIC,
                                     blob_uri="file:///blobs/a/2", sha256="c" * 64, size=200))
    with chaos.nodes[old].channel() as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.AgentServiceStub(channel).CommitCheckpoint(request, timeout=8,
                                                               metadata=credentials_for(chaos.nodes[old].grpc))
    waited = time.monotonic() - started
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "outcome unknown" in err.value.details(), err.value
    assert waited < FAST["leader_fallback_timeout"] + 2.5, waited
    chaos.network.heal()
    proxied.commit("a", 2, rid="cp-unknown")  # the retry, same request id: applied once, whichever way it went
    chaos.converged(15)
    assert proxied.checkpoints() == [1, 2]


def test_paused_leader_is_replaced_and_catches_up_when_resumed(chaos: ChaosCluster, proxied: ProxiedClient) -> None:
    proxied.create_group()
    proxied.register("a")
    old = chaos.leader()
    chaos.pause(old)
    new = chaos.leader(timeout=10, among=others(chaos, old))
    for i in range(1, 6):
        proxied.commit("a", i)
    chaos.resume(old)
    digest = chaos.converged(15)
    status = chaos.statuses()[old]
    assert status.content_digest == digest and status.role == "follower" and chaos.node_of(status.leader) == new
    assert proxied.checkpoints() == [1, 2, 3, 4, 5]


def test_one_way_loss_silences_only_that_direction(chaos: ChaosCluster, proxied: ProxiedClient) -> None:
    proxied.create_group()
    proxied.register("a")
    leader = chaos.leader()
    follower = others(chaos, leader)[0]
    term = chaos.statuses()[leader].term
    link = chaos.raft_links[frozenset((leader, follower))]
    lost = link.direction(leader, follower)
    chaos.network.one_way(leader, follower)

    def both_terms_rose() -> bool:
        s = chaos.statuses()
        return leader in s and follower in s and s[follower].term > term and s[leader].term > term

    # The follower hears no heartbeat, so it campaigns; its vote request reaches the
    # leader, which adopts the higher term: loss in one direction only.
    wait_for(both_terms_rose, "the follower to campaign and the leader to hear it", timeout=10)
    forwarded = chaos.link_stats()[link.name].forwarded(lost)
    proxied.commit("a", 1)  # the cluster still serves, with whichever leader it settles on
    stats = chaos.link_stats()[link.name]
    assert stats.dropped(lost) > 0 and stats.forwarded(lost) == forwarded
    chaos.network.heal()
    chaos.converged(15)
    assert proxied.checkpoints() == [1]


def test_deafened_leader_steps_down_and_the_others_elect(chaos: ChaosCluster, proxied: ProxiedClient) -> None:
    proxied.create_group()
    proxied.register("a")
    old = chaos.leader()
    chaos.network.deafen(old)  # it can send but hears nothing: no acknowledgements, no votes
    wait_for(lambda: chaos.statuses()[old].role != "leader", "the deaf leader to step down", timeout=10)
    chaos.leader(timeout=20, among=others(chaos, old))
    proxied.commit("a", 1)
    chaos.network.heal()
    chaos.converged(15)
    assert proxied.checkpoints() == [1]


def test_wiped_follower_catches_up_to_the_same_digest(chaos: ChaosCluster, proxied: ProxiedClient) -> None:
    proxied.create_group()
    proxied.register("a")
    for i in range(1, 21):
        proxied.commit("a", i)
    follower = others(chaos, chaos.leader())[0]
    marker = chaos.nodes[follower].data_dir / "marker"
    marker.write_text("from before the wipe")
    chaos.wipe(follower)
    assert not marker.exists()
    for i in range(21, 26):
        proxied.commit("a", i)
    digest = chaos.converged(20)
    assert chaos.statuses()[follower].content_digest == digest
    assert proxied.checkpoints() == list(range(1, 26))


def settled_leader(chaos: ChaosCluster) -> tuple[int, int] | None:
    """(leader, term) once every other node's status names that leader too: a follower
    learns who leads from the leader's first append, which can come well after the
    leader claims it on a loaded machine."""
    leader = chaos.leader()
    statuses = chaos.statuses()
    named = {chaos.node_of(s.leader) for i, s in statuses.items() if i != leader}
    return (leader, statuses[leader].term) if len(statuses) == chaos.size and named == {leader} else None


def test_redirects_keep_clients_behind_the_proxies(chaos: ChaosCluster) -> None:
    endpoints = chaos.endpoints()
    request = pb.CreateGroupRequest(request_id="cg-r", spec=pb.GroupSpec(group="r", mode=pb.CIC_BCS))

    def followers_redirect() -> tuple[int, int] | None:
        """Each follower that knows the leader refuses the write as UNAVAILABLE and names
        the leader's proxied address. Asked again only when leadership moved meanwhile."""
        settled = wait_for(lambda: settled_leader(chaos), "every node to know the leader", timeout=20)
        leader = settled[0]
        answers: dict[int, object] = {}
        for follower in others(chaos, leader):
            with chaos.client_tls().channel(endpoints[follower]) as channel:
                try:
                    answers[follower] = pb_grpc.AdminServiceStub(channel).CreateGroup(
                        request, timeout=5, metadata=credentials_for(endpoints[follower]))
                except grpc.RpcError as err:
                    answers[follower] = (err.code(), err.details(),
                                         dict(err.trailing_metadata() or ()).get(LEADER_METADATA_KEY))
        if settled_leader(chaos) != settled:
            return None
        expected = (grpc.StatusCode.UNAVAILABLE, f"not the leader; leader is {endpoints[leader]}", endpoints[leader])
        assert answers == dict.fromkeys(answers, expected)
        return settled

    leader = wait_for(followers_redirect, "one leadership to last through the calls", timeout=40, interval=0.2)[0]
    # Cut clients off the leader's proxy: a client that starts at a follower is sent
    # there and cannot get around it.
    chaos.network.isolate_client(leader)
    start = others(chaos, leader)[0]
    with ProxiedClient([endpoints[start]], deadline=3.0) as client:
        with pytest.raises(CoordinatorUnavailable):
            client.create_group("r", rid="cg-r")
    chaos.network.heal()
    with ProxiedClient([endpoints[start]]) as client:
        client.create_group("r", rid="cg-r")
    assert chaos.link_stats()[f"grpc:{leader}"].forwarded_up > 0


def test_client_delay_slows_only_that_nodes_link(chaos: ChaosCluster) -> None:
    endpoints = chaos.endpoints()

    def round_trip(i: int) -> float:
        with chaos.client_tls().channel(endpoints[i]) as channel:
            stub = pb_grpc.AdminServiceStub(channel)
            stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5,
                               metadata=credentials_for(endpoints[i]))  # connect first
            started = time.monotonic()
            stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5, metadata=credentials_for(endpoints[i]))
            return time.monotonic() - started

    chaos.network.delay_client(0, 150)
    slow, fast = round_trip(0), round_trip(1)
    assert slow >= 0.3 and fast < slow, (slow, fast)  # 150 ms each way


def test_flaky_links_reset_connections_and_the_cluster_still_commits(chaos: ChaosCluster,
                                                                       proxied: ProxiedClient) -> None:
    proxied.create_group()
    proxied.register("a")
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        chaos.network.flaky(i, j, 0.5)
    wait_for(lambda: sum(s.reset for n, s in chaos.link_stats().items() if n.startswith("raft")) >= 2,
             "flaky resets", timeout=15)
    for i in range(1, 6):
        proxied.commit("a", i)
    chaos.network.heal()
    chaos.converged(15)
    assert proxied.checkpoints() == [1, 2, 3, 4, 5]


class FakeDisk:
    """Records what the controller asks of a disk; the mountpoint is a plain directory."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name in ("create", "mount", "unmount", "fill", "unfill", "power_cut", "power_cycle", "throttle", "unthrottle", "close"):
            return lambda *args: self.calls.append((name, *args))
        raise AttributeError(name)


def test_disk_hooks_put_data_on_the_disk_and_reach_it(tmp_path: Path) -> None:
    disks: dict[int, FakeDisk] = {}

    def disk(i: int) -> FakeDisk:
        disks[i] = FakeDisk(tmp_path / f"mnt{i}")
        disks[i].mountpoint.mkdir()
        return disks[i]

    with ChaosCluster(tmp_path / "c", 3, settings=FAST, disks=disk) as chaos, clients_trust(chaos):
        chaos.start_all()
        chaos.leader()
        assert all((disks[i].mountpoint / "data" / "raft.journal").exists() for i in range(3))
        pid = chaos.nodes[1].process.pid
        chaos.disks.slow(1, write_bps=4096, write_iops=10)
        chaos.disks.fill(2, leave_bytes=100)
        chaos.power_cut(0)
        assert not chaos.nodes[0].alive
        assert disks[0].calls == [("create",), ("mount",), ("power_cut",)]
        chaos.power_on(0)
        assert chaos.nodes[0].alive
        assert disks[0].calls[-1] == ("power_cycle",)
        assert disks[1].calls[-1] == ("throttle", [pid], 4096, 10)
        assert disks[2].calls[-1] == ("fill", 100)
    assert all(d.calls[-2:] == [("unmount",), ("close",)] for d in disks.values())
