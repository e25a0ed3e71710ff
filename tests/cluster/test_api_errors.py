"""Every RPC's error statuses through real gRPC on the shared 3-node cluster.

Table-driven: each case is one request, the status it must get, and a fragment
the details must contain (the field for INVALID_ARGUMENT, the reason otherwise).
After each rejected request the leader's domain state digest must be unchanged:
a refusal never changes state, whether it was refused before proposing or by the
state machine.
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import grpc
import pytest

from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import LocalCluster, credentials_for, wait_for
from tests.support.cluster import Client, past_overload
from tests.support.metrics import scrape

pytestmark = pytest.mark.cluster

SHA = "ab" * 32
OVERSIZED = "x" * (4 * 1024 * 1024 + 1)
C = grpc.StatusCode


def tok(incarnation: int = 1, epoch: int = 0) -> pb.FencingToken:
    return pb.FencingToken(secret=b"s" * 16, incarnation=incarnation, epoch=epoch)


def cp(group: str, agent: str, index: int, *, epoch: int = 0, kind: int = pb.BASIC, **fields) -> pb.CheckpointMeta:
    values = dict(group=group, agent_id=agent, index=index, epoch=epoch, kind=kind,
                  blob_uri=f"file:///blobs/{agent}/{index}", sha256=SHA, size=10)
    values.update(fields)
    return pb.CheckpointMeta(**values)


def commit_req(rid: str, group: str, agent: str, index: int, *, inc: int = 1, token_epoch: int = 0,
               **fields) -> pb.CommitCheckpointRequest:
    return pb.CommitCheckpointRequest(request_id=rid, token=tok(inc, token_epoch), checkpoint=cp(group, agent, index,
                                                                                                 **fields))


def dep(sender: str, receiver: str, message_id: str, send: int = 1, receive: int = 1) -> pb.DependencyRecord:
    return pb.DependencyRecord(sender=sender, send_interval=send, receiver=receiver, receive_interval=receive,
                               message_id=message_id)


def deps_req(rid: str, group: str, agent: str, records: list[pb.DependencyRecord], inc: int = 1):
    return pb.ReportDependenciesRequest(request_id=rid, group=group, agent_id=agent, token=tok(inc), records=records)


@dataclass(frozen=True)
class World:
    """Names and ids of what the module's setup created."""

    order_for_co2_a: int


@pytest.fixture(scope="module")
def world(shared_cluster: LocalCluster) -> World:
    """Groups in the states the table needs. Every agent's lease is an hour, so the
    leader loop proposes nothing for them while the table runs."""
    client = Client(shared_cluster)
    hour = dict(lease_ttl_s=3600, epoch_timeout_s=3600)
    for name, mode in (("e-cic", pb.CIC_BCS), ("e-co", pb.COORDINATED), ("e-co2", pb.COORDINATED),
                       ("e-empty", pb.COORDINATED), ("e-rb", pb.CIC_BCS)):
        client.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"e-setup-cg-{name}", spec=pb.GroupSpec(group=name, mode=mode, **hour)))
    for group, agent in (("e-cic", "e-a"), ("e-cic", "e-b"), ("e-co", "e-co-a"), ("e-co2", "e-co2-a"),
                         ("e-co2", "e-co2-b"), ("e-rb", "e-rb-a")):
        assert client.register(agent, group=group, rid=f"e-setup-reg-{agent}").incarnation == 1
    for index in (1, 3):
        client.call("AgentService", "CommitCheckpoint", commit_req(f"e-setup-cp-a-{index}", "e-cic", "e-a", index))
    client.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e-setup-epoch", group="e-co2"))
    client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(request_id="e-setup-sp", group="e-cic",
                                                                             name="e-sp"))
    # e-rb-a restarts while alive: its old incarnation counts as crashed, the group
    # recovers, and the new incarnation owes a rollback acknowledgement.
    client.call("AgentService", "CommitCheckpoint", commit_req("e-setup-cp-rb-1", "e-rb", "e-rb-a", 1))
    assert client.register("e-rb-a", group="e-rb", rid="e-setup-reg-rb-2").incarnation == 2
    watch = pb.WatchOrdersRequest(group="e-co2", agent_id="e-co2-a", token=tok(1))
    with Connection(shared_cluster.endpoints(), token=shared_cluster.token, tls=shared_cluster.client_tls()) as conn:
        [order] = wait_for(lambda: conn.collect("AgentService", "WatchOrders", watch, window=0.6),
                           "e-co2-a's checkpoint order")
    return World(order_for_co2_a=order.order_id)


@dataclass(frozen=True)
class Case:
    id: str
    service: str
    method: str
    request: Callable[[World], object]
    code: grpc.StatusCode
    says: str  # a fragment of the details: the field, or the reason


def case(id: str, method: str, request, code: grpc.StatusCode, says: str) -> Case:
    service = "AdminService" if method in pb.DESCRIPTOR.services_by_name["AdminService"].methods_by_name \
        else "AgentService"
    return Case(id, service, method, request if callable(request) else (lambda w, r=request: r), code, says)


CASES = [
    # ---- Register
    case("register-no-request-id", "Register", pb.RegisterRequest(secret=b"s" * 16, group="e-cic", agent_id="x"),
         C.INVALID_ARGUMENT, "request_id"),
    case("register-bad-agent-id", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="e-r1", group="e-cic", agent_id="bad id"),
         C.INVALID_ARGUMENT, "agent_id"),
    case("register-bad-group", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="e-r2", group="-g", agent_id="x"),
         C.INVALID_ARGUMENT, "group"),
    case("register-unknown-group", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="e-r3", group="e-nope", agent_id="x"),
         C.NOT_FOUND, "group 'e-nope'"),
    # ---- CommitCheckpoint: input checked before proposing
    case("commit-no-request-id", "CommitCheckpoint", commit_req("", "e-cic", "e-a", 5), C.INVALID_ARGUMENT,
         "request_id"),
    case("commit-bad-request-id", "CommitCheckpoint", commit_req("has space", "e-cic", "e-a", 5), C.INVALID_ARGUMENT,
         "request_id"),
    case("commit-sha-not-hex", "CommitCheckpoint", commit_req("e-c1", "e-cic", "e-a", 5, sha256="zz" * 32),
         C.INVALID_ARGUMENT, "checkpoint.sha256"),
    case("commit-sha-upper-hex", "CommitCheckpoint", commit_req("e-c2", "e-cic", "e-a", 5, sha256="AB" * 32),
         C.INVALID_ARGUMENT, "checkpoint.sha256"),
    case("commit-sha-short", "CommitCheckpoint", commit_req("e-c3", "e-cic", "e-a", 5, sha256="ab" * 31),
         C.INVALID_ARGUMENT, "checkpoint.sha256"),
    case("commit-index-zero", "CommitCheckpoint", commit_req("e-c4", "e-cic", "e-a", 0), C.INVALID_ARGUMENT,
         "checkpoint.index"),
    case("commit-unknown-kind", "CommitCheckpoint", commit_req("e-c5", "e-cic", "e-a", 5, kind=99),
         C.INVALID_ARGUMENT, "checkpoint.kind"),
    case("commit-unspecified-kind", "CommitCheckpoint", commit_req("e-c6", "e-cic", "e-a", 5, kind=0),
         C.INVALID_ARGUMENT, "checkpoint.kind"),
    case("commit-no-blob-uri", "CommitCheckpoint", commit_req("e-c7", "e-cic", "e-a", 5, blob_uri=""),
         C.INVALID_ARGUMENT, "checkpoint.blob_uri"),
    case("commit-long-blob-uri", "CommitCheckpoint", commit_req("e-c8", "e-cic", "e-a", 5, blob_uri="f" * 3000),
         C.INVALID_ARGUMENT, "checkpoint.blob_uri"),
    case("commit-parent-not-below", "CommitCheckpoint", commit_req("e-c9", "e-cic", "e-a", 5, parent_index=5),
         C.INVALID_ARGUMENT, "checkpoint.parent_index"),
    case("commit-long-config-hash", "CommitCheckpoint", commit_req("e-c10", "e-cic", "e-a", 5, config_hash="h" * 257),
         C.INVALID_ARGUMENT, "checkpoint.config_hash"),
    case("commit-too-many-dependency-versions", "CommitCheckpoint",
         commit_req("e-c11", "e-cic", "e-a", 5, dependency_versions={f"d{i}": "1" for i in range(65)}),
         C.INVALID_ARGUMENT, "checkpoint.dependency_versions"),
    case("commit-bad-agent-id", "CommitCheckpoint", commit_req("e-c12", "e-cic", "a/b", 5), C.INVALID_ARGUMENT,
         "checkpoint.agent_id"),
    case("commit-over-4-mib", "CommitCheckpoint", commit_req("e-c13", "e-cic", "e-a", 5, config_hash=OVERSIZED),
         C.RESOURCE_EXHAUSTED, "larger than max"),
    # ---- CommitCheckpoint: refused by the state machine
    case("commit-kind-not-for-mode", "CommitCheckpoint", commit_req("e-c14", "e-cic", "e-a", 5, kind=pb.COORDINATED_CUT),
         C.INVALID_ARGUMENT, "checkpoint.kind"),
    case("commit-unknown-group", "CommitCheckpoint", commit_req("e-c15", "e-nope", "e-a", 5), C.NOT_FOUND, "e-nope"),
    case("commit-unknown-agent", "CommitCheckpoint", commit_req("e-c16", "e-cic", "e-zz", 5), C.NOT_FOUND, "e-zz"),
    case("commit-stale-incarnation", "CommitCheckpoint", commit_req("e-c17", "e-cic", "e-a", 5, inc=7),
         C.FAILED_PRECONDITION, "token.incarnation"),
    case("commit-epoch-not-started", "CommitCheckpoint",
         commit_req("e-c18", "e-co", "e-co-a", 1, token_epoch=5, epoch=5, kind=pb.COORDINATED_CUT),
         C.FAILED_PRECONDITION, "epoch 5 has not started"),
    case("commit-stale-epoch", "CommitCheckpoint",
         commit_req("e-c19", "e-co2", "e-co2-a", 1, token_epoch=1, epoch=0, kind=pb.COORDINATED_CUT),
         C.FAILED_PRECONDITION, "checkpoint.epoch"),
    case("commit-rollback-pending", "CommitCheckpoint", commit_req("e-c20", "e-rb", "e-rb-a", 2, inc=2),
         C.FAILED_PRECONDITION, "rollback order"),
    case("commit-index-not-rising", "CommitCheckpoint", commit_req("e-c21", "e-cic", "e-a", 2),
         C.FAILED_PRECONDITION, "checkpoint.index"),
    case("commit-missing-parent", "CommitCheckpoint", commit_req("e-c22", "e-cic", "e-a", 5, parent_index=2),
         C.FAILED_PRECONDITION, "checkpoint.parent_index"),
    case("commit-same-index-other-metadata", "CommitCheckpoint", commit_req("e-c23", "e-cic", "e-a", 3, size=11),
         C.ALREADY_EXISTS, "checkpoint.index"),
    # ---- ReportDependencies
    case("deps-no-request-id", "ReportDependencies", deps_req("", "e-cic", "e-b", [dep("e-a", "e-b", "m1")]),
         C.INVALID_ARGUMENT, "request_id"),
    case("deps-wrong-receiver", "ReportDependencies", deps_req("e-d1", "e-cic", "e-b", [dep("e-a", "e-a", "m1")]),
         C.INVALID_ARGUMENT, "records[0].receiver"),
    case("deps-bad-sender", "ReportDependencies",
         deps_req("e-d2", "e-cic", "e-b", [dep("e-a", "e-b", "m1"), dep("", "e-b", "m2")]),
         C.INVALID_ARGUMENT, "records[1].sender"),
    case("deps-bad-message-id", "ReportDependencies", deps_req("e-d3", "e-cic", "e-b", [dep("e-a", "e-b", "m 1")]),
         C.INVALID_ARGUMENT, "records[0].message_id"),
    case("deps-interval-zero", "ReportDependencies", deps_req("e-d4", "e-cic", "e-b", [dep("e-a", "e-b", "m1", 0)]),
         C.INVALID_ARGUMENT, "records[0]"),
    case("deps-too-many", "ReportDependencies",
         deps_req("e-d5", "e-cic", "e-b", [dep("e-a", "e-b", f"m{i}") for i in range(10_001)]),
         C.INVALID_ARGUMENT, "records"),
    case("deps-over-4-mib", "ReportDependencies",
         deps_req("e-d6", "e-cic", "e-b", [dep("e-a", "e-b", OVERSIZED)]), C.RESOURCE_EXHAUSTED, "larger than max"),
    case("deps-unknown-group", "ReportDependencies", deps_req("e-d7", "e-nope", "e-b", [dep("e-a", "e-b", "m1")]),
         C.NOT_FOUND, "e-nope"),
    case("deps-unknown-agent", "ReportDependencies", deps_req("e-d8", "e-cic", "e-zz", [dep("e-a", "e-zz", "m1")]),
         C.NOT_FOUND, "e-zz"),
    case("deps-stale-incarnation", "ReportDependencies",
         deps_req("e-d9", "e-cic", "e-b", [dep("e-a", "e-b", "m1")], inc=3), C.FAILED_PRECONDITION,
         "token.incarnation"),
    # ---- AckOrder
    case("ack-no-request-id", "AckOrder", pb.AckOrderRequest(group="e-co2", agent_id="e-co2-b", token=tok(),
                                                            order_id=1), C.INVALID_ARGUMENT, "request_id"),
    case("ack-bad-group", "AckOrder", pb.AckOrderRequest(request_id="e-k1", group="", agent_id="e-co2-b", token=tok(),
                                                        order_id=1), C.INVALID_ARGUMENT, "group"),
    case("ack-someone-elses-order", "AckOrder",
         lambda w: pb.AckOrderRequest(request_id="e-k2", group="e-co2", agent_id="e-co2-b", token=tok(),
                                      order_id=w.order_for_co2_a), C.INVALID_ARGUMENT, "order_id"),
    case("ack-unknown-group", "AckOrder", pb.AckOrderRequest(request_id="e-k3", group="e-nope", agent_id="e-a",
                                                            token=tok(), order_id=1), C.NOT_FOUND, "e-nope"),
    case("ack-unknown-agent", "AckOrder", pb.AckOrderRequest(request_id="e-k4", group="e-co2", agent_id="e-zz",
                                                            token=tok(), order_id=1), C.NOT_FOUND, "e-zz"),
    case("ack-stale-incarnation", "AckOrder", pb.AckOrderRequest(request_id="e-k5", group="e-rb", agent_id="e-rb-a",
                                                                token=tok(1), order_id=1),
         C.FAILED_PRECONDITION, "token.incarnation"),
    # ---- Deregister
    case("deregister-bad-agent-id", "Deregister", pb.DeregisterRequest(request_id="e-x1", group="e-cic",
                                                                      agent_id="é", token=tok()),
         C.INVALID_ARGUMENT, "agent_id"),
    case("deregister-unknown-agent", "Deregister", pb.DeregisterRequest(request_id="e-x2", group="e-cic",
                                                                       agent_id="e-zz", token=tok()),
         C.NOT_FOUND, "e-zz"),
    case("deregister-stale-incarnation", "Deregister", pb.DeregisterRequest(request_id="e-x3", group="e-cic",
                                                                           agent_id="e-b", token=tok(9)),
         C.FAILED_PRECONDITION, "token.incarnation"),
    # ---- Heartbeat and WatchOrders: the same agent and token checks
    *(case(f"{method.lower()}-{what}", method, request_type(group=group, agent_id=agent, token=tok(inc)), code, says)
      for method, request_type in (("Heartbeat", pb.HeartbeatRequest), ("WatchOrders", pb.WatchOrdersRequest))
      for what, group, agent, inc, code, says in (
          ("bad-agent-id", "e-cic", "a b", 1, C.INVALID_ARGUMENT, "agent_id"),
          ("unknown-group", "e-nope", "e-a", 1, C.NOT_FOUND, "e-nope"),
          ("unknown-agent", "e-cic", "e-zz", 1, C.NOT_FOUND, "e-zz"),
          ("stale-incarnation", "e-rb", "e-rb-a", 1, C.FAILED_PRECONDITION, "token.incarnation"))),
    # ---- CreateGroup
    case("create-no-request-id", "CreateGroup", pb.CreateGroupRequest(spec=pb.GroupSpec(group="e-new")),
         C.INVALID_ARGUMENT, "request_id"),
    case("create-bad-name", "CreateGroup", pb.CreateGroupRequest(request_id="e-g1", spec=pb.GroupSpec(group="a b")),
         C.INVALID_ARGUMENT, "spec.group"),
    case("create-unknown-mode", "CreateGroup", pb.CreateGroupRequest(
        request_id="e-g2", spec=pb.GroupSpec(group="e-new", mode=42)), C.INVALID_ARGUMENT, "spec.mode"),
    case("create-retention-too-big", "CreateGroup", pb.CreateGroupRequest(
        request_id="e-g3", spec=pb.GroupSpec(group="e-new", retention=5000)), C.INVALID_ARGUMENT, "spec.retention"),
    case("create-nan-lease", "CreateGroup", pb.CreateGroupRequest(
        request_id="e-g4", spec=pb.GroupSpec(group="e-new", lease_ttl_s=float("nan"))), C.INVALID_ARGUMENT,
        "spec.lease_ttl_s"),
    case("create-negative-interval", "CreateGroup", pb.CreateGroupRequest(
        request_id="e-g5", spec=pb.GroupSpec(group="e-new", checkpoint_interval_s=-1)), C.INVALID_ARGUMENT,
        "spec.checkpoint_interval_s"),
    case("create-exists-with-other-spec", "CreateGroup", pb.CreateGroupRequest(
        request_id="e-g6", spec=pb.GroupSpec(group="e-cic", mode=pb.COORDINATED)), C.ALREADY_EXISTS, "spec.group"),
    # ---- StartEpoch, GarbageCollect and DeleteGroup: writes naming a group
    *(case(f"{method.lower()}-{what}", method, request_type(request_id=rid, group=group), code, says)
      for method, request_type in (("StartEpoch", pb.StartEpochRequest), ("GarbageCollect", pb.GarbageCollectRequest),
                                   ("DeleteGroup", pb.DeleteGroupRequest))
      for what, rid, group, code, says in (
          ("no-request-id", "", "e-co", C.INVALID_ARGUMENT, "request_id"),
          ("bad-group", f"e-{method}-1", "é", C.INVALID_ARGUMENT, "group"),
          ("unknown-group", f"e-{method}-2", "e-nope", C.NOT_FOUND, "e-nope"))),
    case("epoch-not-coordinated", "StartEpoch", pb.StartEpochRequest(request_id="e-s3", group="e-cic"),
         C.FAILED_PRECONDITION, "not coordinated"),
    case("epoch-still-open", "StartEpoch", pb.StartEpochRequest(request_id="e-s4", group="e-co2"),
         C.FAILED_PRECONDITION, "still open"),
    case("epoch-no-live-members", "StartEpoch", pb.StartEpochRequest(request_id="e-s5", group="e-empty"),
         C.FAILED_PRECONDITION, "no live members"),
    # ---- reads
    case("get-bad-group", "GetGroup", pb.GetGroupRequest(group=""), C.INVALID_ARGUMENT, "group"),
    case("get-unknown-group", "GetGroup", pb.GetGroupRequest(group="e-nope"), C.NOT_FOUND, "e-nope"),
    case("list-bad-group", "ListCheckpoints", pb.ListCheckpointsRequest(group="a b"), C.INVALID_ARGUMENT, "group"),
    case("list-bad-agent-id", "ListCheckpoints", pb.ListCheckpointsRequest(group="e-cic", agent_id="a b"),
         C.INVALID_ARGUMENT, "agent_id"),
    case("list-unknown-group", "ListCheckpoints", pb.ListCheckpointsRequest(group="e-nope"), C.NOT_FOUND, "e-nope"),
    case("list-unknown-agent", "ListCheckpoints", pb.ListCheckpointsRequest(group="e-cic", agent_id="e-zz"),
         C.NOT_FOUND, "e-zz"),
    case("whatif-bad-group", "WhatIf", pb.WhatIfRequest(group="", failed=["e-a"]), C.INVALID_ARGUMENT, "group"),
    case("whatif-bad-failed-id", "WhatIf", pb.WhatIfRequest(group="e-cic", failed=["a b"]), C.INVALID_ARGUMENT,
         "failed[0]"),
    case("whatif-unknown-group", "WhatIf", pb.WhatIfRequest(group="e-nope", failed=["e-a"]), C.NOT_FOUND, "e-nope"),
    case("whatif-unknown-agent", "WhatIf", pb.WhatIfRequest(group="e-cic", failed=["e-zz"]), C.NOT_FOUND, "e-zz"),
    # ---- savepoints
    *(case(f"{method.lower()}-{what}", method, request_type(request_id=rid, group=group, name=name), code, says)
      for method, request_type in (("CreateSavepoint", pb.CreateSavepointRequest),
                                   ("DeleteSavepoint", pb.DeleteSavepointRequest))
      for what, rid, group, name, code, says in (
          ("no-request-id", "", "e-cic", "e-sp2", C.INVALID_ARGUMENT, "request_id"),
          ("bad-group", f"e-{method}-1", "é", "e-sp2", C.INVALID_ARGUMENT, "group"),
          ("bad-name", f"e-{method}-2", "e-cic", "a b", C.INVALID_ARGUMENT, "name"),
          ("unknown-group", f"e-{method}-3", "e-nope", "e-sp2", C.NOT_FOUND, "e-nope"))),
    case("savepoint-bad-label", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id="e-sp4", group="e-cic", name="e-sp2", labels={"k": "\x00"}), C.INVALID_ARGUMENT, "labels[k]"),
    case("savepoint-exists", "CreateSavepoint", pb.CreateSavepointRequest(request_id="e-sp5", group="e-cic",
                                                                          name="e-sp"), C.ALREADY_EXISTS, "e-sp"),
    case("savepoint-no-stable-epoch", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id="e-sp6", group="e-co2", name="e-sp"), C.FAILED_PRECONDITION, "no stable epoch"),
    case("savepoint-unknown", "DeleteSavepoint", pb.DeleteSavepointRequest(request_id="e-sp7", group="e-cic",
                                                                           name="e-sp2"), C.NOT_FOUND, "e-sp2"),
    # ---- retention
    *(case(f"setretention-{what}", "SetRetention", pb.SetRetentionRequest(request_id=rid, group=group, policy=policy),
           code, says)
      for what, rid, group, policy, code, says in (
          ("no-request-id", "", "e-cic", pb.RetentionPolicy(keep_last=1), C.INVALID_ARGUMENT, "request_id"),
          ("bad-group", "e-rt1", "a b", pb.RetentionPolicy(keep_last=1), C.INVALID_ARGUMENT, "group"),
          ("negative-keep-last", "e-rt2", "e-cic", pb.RetentionPolicy(keep_last=-1), C.INVALID_ARGUMENT,
           "policy.keep_last"),
          ("buckets-beyond-bound", "e-rt3", "e-cic", pb.RetentionPolicy(bucket_seconds=3600.0, buckets=10_001),
           C.INVALID_ARGUMENT, "policy.buckets"),
          ("bucket-seconds-nan", "e-rt4", "e-cic", pb.RetentionPolicy(bucket_seconds=float("nan"), buckets=2),
           C.INVALID_ARGUMENT, "policy.bucket_seconds"),
          ("unknown-group", "e-rt5", "e-nope", pb.RetentionPolicy(keep_last=1), C.NOT_FOUND, "e-nope"))),
    case("list-savepoints-bad-group", "ListSavepoints", pb.ListSavepointsRequest(group="a b"), C.INVALID_ARGUMENT,
         "group"),
    case("list-savepoints-unknown-group", "ListSavepoints", pb.ListSavepointsRequest(group="e-nope"), C.NOT_FOUND,
         "e-nope"),
    # ---- RestoreGroup (e-cic: e-a has checkpoints 1 and 3, savepoint e-sp); its dry run is checked alike
    case("restore-no-request-id", "RestoreGroup", pb.RestoreGroupRequest(group="e-cic", savepoint="e-sp"),
         C.INVALID_ARGUMENT, "request_id"),
    *(case(f"restore{'-dry-run' if dry else ''}-{what}", "RestoreGroup", pb.RestoreGroupRequest(
        request_id=f"e-rg-{what}", dry_run=dry, **fields), code, says)
      for dry in (False, True)
      for what, fields, code, says in (
          ("bad-group", dict(group="a b", savepoint="e-sp"), C.INVALID_ARGUMENT, "group"),
          ("neither", dict(group="e-cic"), C.INVALID_ARGUMENT, "savepoint: name a savepoint"),
          ("index-zero", dict(group="e-cic", containing=[pb.SavedCheckpoint(agent_id="e-a", index=0)]),
           C.INVALID_ARGUMENT, "containing[0].index"),
          ("unknown-group", dict(group="e-nope", savepoint="e-sp"), C.NOT_FOUND, "e-nope"),
          ("unknown-savepoint", dict(group="e-cic", savepoint="e-nosp"), C.NOT_FOUND, "e-nosp"),
          ("unknown-agent", dict(group="e-cic", containing=[pb.SavedCheckpoint(agent_id="e-zz", index=1)]),
           C.NOT_FOUND, "e-zz"),
          ("no-such-checkpoint", dict(group="e-cic", containing=[pb.SavedCheckpoint(agent_id="e-a", index=2)]),
           C.FAILED_PRECONDITION, "no stable checkpoint 2"))),
    # ---- ForkGroup (e-sp holds e-a at 3 and e-b at its initial state)
    *(case(f"fork-{what}", "ForkGroup", pb.ForkGroupRequest(**fields), code, says)
      for what, fields, code, says in (
          ("no-request-id", dict(group="e-cic", savepoint="e-sp", into="e-fork"), C.INVALID_ARGUMENT, "request_id"),
          ("bad-into", dict(request_id="e-fg1", group="e-cic", savepoint="e-sp", into="a b"), C.INVALID_ARGUMENT,
           "into"),
          ("into-exists", dict(request_id="e-fg2", group="e-cic", savepoint="e-sp", into="e-co"), C.ALREADY_EXISTS,
           "'e-co' exists already"),
          ("unknown-savepoint", dict(request_id="e-fg3", group="e-cic", savepoint="e-nosp", into="e-fork"),
           C.NOT_FOUND, "e-nosp"),
          ("no-copy", dict(request_id="e-fg4", group="e-cic", savepoint="e-sp", into="e-fork"), C.INVALID_ARGUMENT,
           "no copy of checkpoint 3 of 'e-a'"),
          ("copy-is-the-original", dict(request_id="e-fg5", group="e-cic", savepoint="e-sp", into="e-fork", copies=[
              pb.ForkedCheckpoint(agent_id="e-a", index=3, blob_uri="file:///blobs/e-a/3")]), C.INVALID_ARGUMENT,
           "copies[0].blob_uri"))),
    case("list-groups-page-size-beyond-bound", "ListGroups", pb.ListGroupsRequest(page_size=1001),
         C.INVALID_ARGUMENT, "page_size"),
    case("list-groups-bad-page-token", "ListGroups", pb.ListGroupsRequest(page_token="no/such"),
         C.INVALID_ARGUMENT, "page_token"),
    case("list-dependencies-bad-group", "ListDependencies", pb.ListDependenciesRequest(group="a b"),
         C.INVALID_ARGUMENT, "group"),
    case("list-dependencies-unknown-group", "ListDependencies", pb.ListDependenciesRequest(group="e-nope"),
         C.NOT_FOUND, "e-nope"),
    case("list-dependencies-bad-page-token", "ListDependencies", pb.ListDependenciesRequest(
        group="e-cic", page_token="e-b/1"), C.INVALID_ARGUMENT, "page_token"),
    # ---- GarbageCollect
    case("gc-while-recovering", "GarbageCollect", pb.GarbageCollectRequest(request_id="e-gc3", group="e-rb"),
         C.FAILED_PRECONDITION, "recovering"),
    # ---- DeleteGroup
    case("delete-group-in-use", "DeleteGroup", pb.DeleteGroupRequest(request_id="e-dg3", group="e-cic"),
         C.FAILED_PRECONDITION, "live agents"),
    case("list-page-size-beyond-bound", "ListCheckpoints", pb.ListCheckpointsRequest(group="e-cic", page_size=1001),
         C.INVALID_ARGUMENT, "page_size"),
    # ---- membership
    case("add-node-not-an-address", "AddNode", pb.MembershipRequest(node="not-an-address"), C.INVALID_ARGUMENT,
         "node"),
    case("add-node-bad-port", "AddNode", pb.MembershipRequest(node="127.0.0.1:99999"), C.INVALID_ARGUMENT, "node"),
    case("add-node-label-too-long", "AddNode", pb.MembershipRequest(node="n" * 64 + ".example:7000"),
         C.INVALID_ARGUMENT, "node"),
    case("remove-node-empty", "RemoveNode", pb.MembershipRequest(node=""), C.INVALID_ARGUMENT, "node"),
]


def call(cluster: LocalCluster, address: str, c: Case, request, timeout: float = 10.0, *, patient: bool = True):
    """`patient`: wait out a leader's load shedding (transient, and not what a case asks
    about); a follower must never shed, so calls to one are not patient."""
    def attempt():
        with cluster.client_tls().channel(address) as channel:
            rpc = getattr(getattr(pb_grpc, f"{c.service}Stub")(channel), c.method)
            result = rpc(request, timeout=timeout, metadata=credentials_for(address))
            return list(result) if c.method == "WatchOrders" else result
    return past_overload(attempt) if patient else attempt()


def leader_state_digest(cluster: LocalCluster) -> tuple[str, str]:
    """(leader gRPC address, its domain state digest), once one node leads."""
    def read() -> tuple[str, str] | None:
        leader = cluster.leader()
        status = leader.status()
        return (leader.grpc, status.state_digest) if status is not None and status.role == "leader" else None
    return wait_for(read, "the leader's state digest")


def test_table_covers_every_rpc() -> None:
    methods = {(s.name, m.name) for s in pb.DESCRIPTOR.services_by_name.values()
               for m in s.methods}
    # Never refused for their input: they take none.
    covered = {(c.service, c.method) for c in CASES} | {("AdminService", "ClusterStatus"),
                                                        ("AdminService", "ResetDedupeClock"),
                                                        ("AdminService", "SaveSnapshot")}
    # Session frames carry the agent RPCs above; tests/transport/test_agent_session.py checks
    # that each refusal on a session says what the unary call says.
    covered |= {("AgentService", "Session")}
    assert methods == covered


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_refused_with_status_and_reason_and_state_unchanged(shared_cluster: LocalCluster, world: World,
                                                             c: Case) -> None:
    leader, before = leader_state_digest(shared_cluster)
    with pytest.raises(grpc.RpcError) as info:
        call(shared_cluster, leader, c, c.request(world))
    assert info.value.code() == c.code, info.value.details()
    assert c.says in (info.value.details() or ""), info.value.details()
    # The reply comes after the leader applied (and stored) whatever was proposed.
    assert leader_state_digest(shared_cluster) == (leader, before)


def valid_requests(world: World) -> Iterator[tuple[str, str, object]]:
    """One acceptable request per RPC: a follower must redirect each without applying it."""
    yield "AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="e-f1", group="e-cic", agent_id="e-f")
    yield "AgentService", "Heartbeat", pb.HeartbeatRequest(group="e-cic", agent_id="e-a", token=tok())
    yield "AgentService", "CommitCheckpoint", commit_req("e-f2", "e-cic", "e-a", 9)
    yield "AgentService", "ReportDependencies", deps_req("e-f3", "e-cic", "e-b", [dep("e-a", "e-b", "mf")])
    yield "AgentService", "WatchOrders", pb.WatchOrdersRequest(group="e-cic", agent_id="e-a", token=tok())
    yield "AgentService", "AckOrder", pb.AckOrderRequest(request_id="e-f4", group="e-co2", agent_id="e-co2-a",
                                                         token=tok(), order_id=world.order_for_co2_a)
    yield "AgentService", "Deregister", pb.DeregisterRequest(request_id="e-f5", group="e-cic", agent_id="e-b",
                                                             token=tok())
    yield "AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="e-f6", spec=pb.GroupSpec(group="e-f"))
    yield "AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e-f7", group="e-co")
    yield "AdminService", "GetGroup", pb.GetGroupRequest(group="e-cic")
    yield "AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="e-cic")
    yield "AdminService", "WhatIf", pb.WhatIfRequest(group="e-cic", failed=["e-a"])
    yield "AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id="e-f8", group="e-cic")
    yield "AdminService", "DeleteGroup", pb.DeleteGroupRequest(request_id="e-f9", group="e-empty")
    yield "AdminService", "AddNode", pb.MembershipRequest(node="127.0.0.1:1")
    yield "AdminService", "RemoveNode", pb.MembershipRequest(node="127.0.0.1:1")
    yield "AdminService", "CreateSavepoint", pb.CreateSavepointRequest(request_id="e-f10", group="e-cic", name="e-f")
    yield "AdminService", "DeleteSavepoint", pb.DeleteSavepointRequest(request_id="e-f11", group="e-cic", name="e-sp")
    yield "AdminService", "ListSavepoints", pb.ListSavepointsRequest(group="e-cic")
    yield "AdminService", "ListGroups", pb.ListGroupsRequest()
    yield "AdminService", "SetRetention", pb.SetRetentionRequest(request_id="e-f12", group="e-cic",
                                                                 policy=pb.RetentionPolicy(keep_last=1))
    yield "AdminService", "ListDependencies", pb.ListDependenciesRequest(group="e-cic")
    yield "AdminService", "RestoreGroup", pb.RestoreGroupRequest(request_id="e-f13", group="e-cic", savepoint="e-sp")
    yield "AdminService", "ForkGroup", pb.ForkGroupRequest(request_id="e-f14", group="e-cic", savepoint="e-sp",
                                                           into="e-fork", copies=[pb.ForkedCheckpoint(
                                                               agent_id="e-a", index=3, blob_uri="file:///copy/3")])


def test_a_follower_redirects_every_rpc_to_the_leader(shared_cluster: LocalCluster, world: World) -> None:
    leader, before = leader_state_digest(shared_cluster)
    leader_node = next(n for n in shared_cluster.nodes if n.grpc == leader)
    follower = next(n for n in shared_cluster.nodes if n.grpc != leader and n.alive)
    wait_for(lambda: (s := follower.status()) is not None and s.leader == leader_node.raft,
             "the follower to know the leader")
    seen = set()
    for service, method, request in valid_requests(world):
        with pytest.raises(grpc.RpcError) as info:
            call(shared_cluster, follower.grpc, Case(method, service, method, lambda w: request, C.UNAVAILABLE, ""), request,
                 patient=False)
        assert info.value.code() == C.UNAVAILABLE, (method, info.value.details())
        assert dict(info.value.trailing_metadata())["raftpoint-leader"] == leader, method
        seen.add((service, method))
    assert seen == {(c.service, c.method) for c in CASES}
    assert leader_state_digest(shared_cluster) == (leader, before)


def scrape_count(metrics_address: str, method: str) -> float:
    return sum(v for k, v in scrape(metrics_address).items()
               if k.startswith("raftpoint_rpc_seconds_count{") and f'method="{method}"' in k)


def test_deadlines_are_honoured_and_the_server_moves_on(shared_cluster: LocalCluster, world: World) -> None:
    leader_address, _ = leader_state_digest(shared_cluster)
    leader = next(n for n in shared_cluster.nodes if n.grpc == leader_address)
    # A unary call with a deadline it cannot meet: its node is stopped until after it.
    # (A read is answered within a millisecond or two now, and gRPC takes an answer that
    # beats its deadline timer, so a short deadline alone proves nothing.)
    follower = next(n for n in shared_cluster.nodes if n.grpc != leader_address)
    with follower.channel() as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        shared_cluster.signal(follower.index, signal.SIGSTOP)  # shorter than an election timeout
        try:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.AdminServiceStub(channel).GetGroup(pb.GetGroupRequest(group="e-cic"), timeout=0.2,
                                                           metadata=credentials_for(follower.grpc))
        finally:
            shared_cluster.signal(follower.index, signal.SIGCONT)
    assert info.value.code() == C.DEADLINE_EXCEEDED, (info.value.code(), info.value.details())
    # A stream that would run for ever ends at its deadline, and the handler behind it
    # ends too (its latency sample is recorded when it returns).
    before = scrape_count(leader.metrics, "WatchOrders")
    started = time.monotonic()
    with leader.channel() as channel:
        with pytest.raises(grpc.RpcError) as info:
            list(pb_grpc.AgentServiceStub(channel).WatchOrders(
                pb.WatchOrdersRequest(group="e-cic", agent_id="e-a", token=tok()), timeout=0.5,
                metadata=credentials_for(leader.grpc)))
    # Ends at its deadline, not for ever (the bound leaves room for a loaded machine's channel set-up).
    assert info.value.code() == C.DEADLINE_EXCEEDED and time.monotonic() - started < 10
    wait_for(lambda: scrape_count(leader.metrics, "WatchOrders") > before, "the stream handler to finish", 10)
    # The node still answers promptly.
    started = time.monotonic()
    reply = call(shared_cluster, leader.grpc, case("d", "GetGroup", None, C.OK, ""), pb.GetGroupRequest(group="e-cic"), timeout=5)
    assert reply.group.spec.group == "e-cic" and time.monotonic() - started < 10


def test_replicas_agree_after_the_refusals(shared_cluster: LocalCluster, world: World) -> None:
    shared_cluster.converged()
    assert len({s.state_digest for s in shared_cluster.statuses().values()}) == 1


@pytest.mark.parametrize("value", ["soon", "-5", "nan", repr(time.time() + 86_400)])
def test_a_bad_issued_at_is_refused_naming_the_metadata(shared_cluster: LocalCluster, world: World,
                                                        value: str) -> None:
    leader, before = leader_state_digest(shared_cluster)
    with shared_cluster.client_tls().channel(leader) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.AdminServiceStub(channel).CreateGroup(
                pb.CreateGroupRequest(request_id=f"e-issued-{value}", spec=pb.GroupSpec(group="e-issued")),
                timeout=5, metadata=(("raftpoint-issued-at", value), *credentials_for(leader)))
    assert info.value.code() == C.INVALID_ARGUMENT and "raftpoint-issued-at" in info.value.details()
    assert leader_state_digest(shared_cluster) == (leader, before)
