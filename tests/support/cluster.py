"""Real coordinator processes on loopback, a leader-following test client, and their fixtures."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import grpc
import pytest

from agent_client.connection import issued_now, overload_hint
from coordinator.api.metadata import LEADER_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import LocalCluster

FAST = {"raft_min_timeout": 0.4, "raft_max_timeout": 0.8, "leader_fallback_timeout": 1.0}
# etcd's election timeout: for tests whose claim is that something does *not* move the
# leader, where a loaded two-core machine's own stalls must not be taken for it.
STABLE = {"raft_min_timeout": 1.0, "raft_max_timeout": 2.0, "leader_fallback_timeout": 3.0}

T = TypeVar("T")


def past_overload(attempt: Callable[[], T], deadline: float = 20.0) -> T:
    """attempt(), again after each overloaded node's hint, as clients do, until `deadline`
    seconds have passed. A loaded two-core machine can make any node shed a call: that
    is a correct, transient answer, not the one a test asks about."""
    end = time.monotonic() + deadline
    while True:
        try:
            return attempt()
        except grpc.RpcError as err:
            hint = overload_hint(err)
            if hint is None or time.monotonic() + hint >= end:
                raise
            time.sleep(hint)


class Client:
    """Sends to the leader, follows redirects, retries UNAVAILABLE (and an overloaded
    node's refusal, after its hint) with the same request."""

    def __init__(self, cluster: LocalCluster, deadline: float = 20.0) -> None:
        self.cluster = cluster
        self.deadline = deadline
        self.target = cluster.nodes[0].grpc

    def call(self, service: str, method: str, request, *, retry: bool = True):
        end = time.monotonic() + self.deadline
        metadata = issued_now() + self.cluster.credentials  # the same on every retry of this call

        def attempt():
            with self.cluster.client_tls().channel(self.target) as channel:
                stub = getattr(pb_grpc, f"{service}Stub")(channel)
                return getattr(stub, method)(request, timeout=5, metadata=metadata)
        while True:
            try:
                return past_overload(attempt, max(0.0, end - time.monotonic())) if retry else attempt()
            except grpc.RpcError as err:
                if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or not retry:
                    raise
                if time.monotonic() > end:
                    raise
                leader = dict(err.trailing_metadata() or ()).get(LEADER_METADATA_KEY)
                live = [n.grpc for n in self.cluster.nodes if n.alive]
                self.target = leader if leader in live else live[(live.index(self.target) + 1) % len(live)
                                                                   if self.target in live else 0]
                time.sleep(0.05)

    # convenience wrappers
    def create_group(self, group: str = "g", mode: int = pb.CIC_BCS, rid: str | None = None,
                     lease_ttl_s: float = 3600.0):
        """Agents here send no heartbeats, so leases are long unless a test wants expiry."""
        return self.call("AdminService", "CreateGroup",
                         pb.CreateGroupRequest(request_id=rid or f"cg-{group}", spec=pb.GroupSpec(
                             group=group, mode=mode, lease_ttl_s=lease_ttl_s)))

    def register(self, agent: str, group: str = "g", rid: str | None = None):
        return self.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id=rid or f"reg-{agent}", group=group,
                                                                       agent_id=agent))

    def commit(self, agent: str, index: int, incarnation: int = 1, group: str = "g", rid: str | None = None):
        return self.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id=rid or f"cp-{agent}-{index}", token=pb.FencingToken(secret=b"s" * 16, incarnation=incarnation),
            checkpoint=pb.CheckpointMeta(group=group, agent_id=agent, index=index, kind=pb.BASIC,
                                         blob_uri=f"file:///blobs/{agent}/{index}", sha256="c" * 64, size=200)))

    def checkpoints(self, group: str = "g", agent: str = "") -> list[int]:
        resp = self.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group=group, agent_id=agent))
        return [c.index for c in resp.checkpoints]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", 3, settings=FAST).start_all() as c:
        c.leader()
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Client:
    return Client(cluster)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster per test module, for tests that leave it intact.

    Starting three processes and electing a leader costs ~1 s; tests that only write
    and read share a cluster and keep apart by using their own group and agent names
    (the test client derives request ids from them, so names must not repeat).
    """
    root: Path = tmp_path_factory.mktemp("shared") / "cluster"
    with LocalCluster(root, 3, settings=FAST).start_all() as c:
        c.leader()
        yield c


@pytest.fixture
def shared_client(shared_cluster: LocalCluster) -> Client:
    shared_cluster.leader()  # a test before may have moved leadership; wait until one is known
    return Client(shared_cluster)
