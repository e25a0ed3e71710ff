"""End to end with real agent processes (chaos.tokens.agent) on a real 3-node cluster.

Each agent is an OS process linked to AgentClient, killed with SIGKILL where a test
says crash, so nothing volatile survives. For every mode: a crash between the blob
write and the metadata commit, a crash after the commit was applied but before the
agent saw the answer, lost messages re-delivered by the restarted receiver, and an
in-flight message from a rolled-back sender refused -- with the tokens conserved.
Then, once each: a zombie incarnation, duplicated and reordered messages across a
restart, and a corrupted blob.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agent_client.blobs.store import MANIFESTS
from agent_client.connection import Connection
from chaos.tokens.agent import CRASH_AFTER_COMMIT_ENV, CRASH_ENV
from chaos.tokens.process import AgentDied, AgentProcess
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
MODES = {"coordinated": pb.COORDINATED, "bcs": pb.CIC_BCS, "hmnr": pb.CIC_HMNR, "fdas": pb.CIC_FDAS,
         "uncoordinated": pb.UNCOORDINATED}
TOKENS = 50


class Agents:
    """A group of agent processes and the admin calls a test makes about them."""

    def __init__(self, cluster: LocalCluster, tmp: Path, group: str, mode: int, names: list[str]) -> None:
        self.group, self.mode, self.tmp, self.names = group, mode, tmp, names
        self.members = sorted({*names, "elsewhere"})  # a peer that never runs: sends to it stay in flight
        self.endpoints = cluster.endpoints()
        self.admin = Connection(self.endpoints, token=cluster.token, tls=cluster.client_tls())
        # The agent processes read their TLS settings from the environment, as deployed agents do.
        self.env = cluster.client_tls().environment()
        self.admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"cg-{group}", spec=pb.GroupSpec(group=group, mode=mode, lease_ttl_s=30,
                                                        checkpoint_interval_s=3600)))
        self.procs = {n: self.process(n) for n in names}
        self.epochs = 0

    def process(self, name: str) -> AgentProcess:
        return AgentProcess(name, group=self.group, endpoints=self.endpoints, blob_dir=self.tmp / "blobs",
                            log_dir=self.tmp / "logs", members=self.members, tokens=TOKENS, env=self.env)

    def start(self, name: str, **env: str) -> dict[str, Any]:
        return self.procs[name].spawn(env={CRASH_ENV: "0", CRASH_AFTER_COMMIT_ENV: "0", **env}).reply()

    def crash(self, name: str) -> None:
        self.procs[name].kill()

    def status(self, name: str) -> dict[str, Any]:
        return self.procs[name].request("status")

    def checkpoint(self, *names: str) -> None:
        """One checkpoint each; in a coordinated group, one epoch that every live member cuts."""
        if self.mode != pb.COORDINATED:
            for name in names:
                self.procs[name].request("checkpoint")
            return
        self.epochs += 1
        epoch = self.admin.call("AdminService", "StartEpoch", pb.StartEpochRequest(
            request_id=f"{self.group}-epoch-{self.epochs}", group=self.group)).epoch.epoch
        for name in names:
            wait_for(lambda: self.procs[name].proc.poll() is not None or self.status(name)["cut_epoch"] >= epoch,
                     f"{name} to cut for epoch {epoch}", 20, 0.05)

    def registered(self, name: str) -> list[int]:
        return [c.index for c in self.admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
            group=self.group, agent_id=name)).checkpoints]

    def running(self) -> bool:
        return self.admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group=self.group)).group.state \
            == pb.RUNNING

    def tokens(self) -> int:
        return sum(self.status(n)["tokens"] for n in self.names)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stop(5)
        self.admin.close()


@pytest.fixture
def agents(shared_cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest):
    made: list[Agents] = []

    def make(mode: int, names: list[str]) -> Agents:
        made.append(Agents(shared_cluster, tmp_path, f"g-{request.node.name}".translate(
            str.maketrans("[]_", "---"))[:100], mode, names))
        return made[-1]

    yield make
    for group in made:
        group.close()


@pytest.mark.parametrize("mode", MODES)
def test_crashes_around_the_metadata_commit(agents, mode: str) -> None:
    group = agents(MODES[mode], ["a"])
    proc = group.procs["a"]
    assert group.start("a", **{CRASH_ENV: "2"})["restore_kind"] == "cold start"
    group.procs["a"].request("send", to="elsewhere")
    group.checkpoint("a")
    at_1 = group.status("a")["tokens"]
    group.procs["a"].request("send", to="elsewhere")
    with pytest.raises(AgentDied):  # SIGKILLed after the blob write, before the commit
        group.checkpoint("a")
        wait_for(lambda: proc.proc.poll() is not None, "the crash", 20)  # coordinated: cut by the order thread
        proc.request("status")
    assert proc.proc.returncode == -9
    assert group.registered("a") == [1] and len(list((group.tmp / "blobs" / MANIFESTS).iterdir())) == 2

    ready = group.start("a", **{CRASH_AFTER_COMMIT_ENV: "1"})
    assert (ready["index"], ready["restore"], ready["tokens"]) == (1, "resume from checkpoint 1", at_1)
    group.procs["a"].request("send", to="elsewhere")
    at_2 = group.status("a")["tokens"]
    with pytest.raises(AgentDied):  # SIGKILLed once the coordinator applied the commit, before the answer
        group.checkpoint("a")
        wait_for(lambda: proc.proc.poll() is not None, "the crash", 20)
        proc.request("status")
    assert group.registered("a") == [1, 2]

    ready = group.start("a")  # resumes from the checkpoint it never heard was committed: its blob is there
    assert (ready["index"], ready["restore"], ready["tokens"]) == (2, "resume from checkpoint 2", at_2)
    group.checkpoint("a")
    assert group.registered("a") == [1, 2, 3]


@pytest.mark.parametrize("mode", MODES)
def test_lost_messages_are_redelivered_and_orphans_refused(agents, mode: str) -> None:
    group = agents(MODES[mode], ["a", "b"])
    for name in group.names:
        group.start(name)
    group.checkpoint("a", "b")
    m1 = group.procs["a"].request("send", to="b")
    assert group.procs["b"].request("deliver", envelope=m1["envelope"])["delivered"]

    group.crash("b")  # b loses the receive; a keeps running and will not send m1 again
    ready = group.start("b")
    assert [m for m, _ in ready["redelivered"]] == [m1["id"]]
    wait_for(group.running, "b's recovery to finish", 20, 0.1)  # any order for a would be carried out by now
    assert ready["tokens"] == TOKENS + m1["amount"] and group.status("a")["rollbacks"] == []
    assert group.tokens() == 2 * TOKENS
    duplicate = group.procs["b"].request("deliver", envelope=m1["envelope"])
    assert not duplicate["delivered"] and not duplicate["orphan"]

    m2 = group.procs["a"].request("send", to="b")  # in flight when a crashes
    group.crash("a")  # a rolls back past both sends: b must forget m1 and refuse m2
    assert group.start("a")["tokens"] == TOKENS
    wait_for(group.running, "b to obey its rollback order", 20, 0.1)
    assert group.tokens() == 2 * TOKENS  # neither message counts: both sends were undone
    refused = group.procs["b"].request("deliver", envelope=m2["envelope"])
    assert not refused["delivered"] and refused["orphan"]
    assert group.status("b")["orphans"] == 1 and group.tokens() == 2 * TOKENS


def test_a_zombie_incarnation_is_rejected(agents) -> None:
    group = agents(pb.CIC_HMNR, ["a"])
    group.start("a")
    zombie = group.procs["a"]
    group.procs["a"] = group.process("a")
    assert group.start("a")["incarnation"] == 2  # a second process for the same agent
    with pytest.raises(RuntimeError, match="FAILED_PRECONDITION.*stale incarnation 1"):
        zombie.request("checkpoint")
    assert zombie.request("status")["incarnation"] == 1
    zombie.stop(5)
    group.checkpoint("a")
    assert group.registered("a") == [1]


def test_duplicated_and_reordered_messages_are_delivered_once_across_a_restart(agents) -> None:
    group = agents(pb.UNCOORDINATED, ["a", "b"])
    for name in group.names:
        group.start(name)
    sent = [group.procs["a"].request("send", to="b") for _ in range(12)]
    sent = [m for m in sent if m["envelope"]]
    network = [m["envelope"] for m in sent] * 3
    random.Random(5).shuffle(network)
    delivered = [group.procs["b"].request("deliver", envelope=e)["delivered"] for e in network]
    assert sum(delivered) == len(sent) and group.tokens() == 2 * TOKENS
    group.checkpoint("b")
    group.crash("b")
    group.start("b")  # restored from its checkpoint: remembers every delivery, not a window of them
    assert not any(group.procs["b"].request("deliver", envelope=e)["delivered"] for e in network)
    assert group.status("b")["duplicates"] == len(network) and group.tokens() == 2 * TOKENS


def test_a_corrupted_blob_is_rejected_with_a_clear_reason(agents) -> None:
    group = agents(pb.CIC_FDAS, ["a"])
    group.start("a")
    group.checkpoint("a")
    # A small state's chunks travel inside its manifest: damage what holds them.
    for stored in [*(group.tmp / "blobs" / "packs").rglob("*"), *(group.tmp / "blobs" / "manifests").rglob("*")]:
        if stored.is_file():
            stored.write_bytes(b"bit rot")
    group.crash("a")
    with pytest.raises(RuntimeError, match=r"cannot resume: rejected: .*(truncated or altered|does not match)"):
        group.start("a")
