"""Authentication, roles and agent secrets against real node processes on loopback.

The cluster runs with the harness's tokens file and a bindings file that adds an
agent identity (group "g", agents "a*") and an observer. Every refusal must come
before anything is proposed: the leader's state digest is unchanged after it.
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest

from agent_client.connection import Rejected
from agent_client.session import connect
from coordinator.api.metadata import REASON_METADATA_KEY, bearer
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.harness.local_cluster import LocalCluster, wait_for
from coordinator.transport.auth import add_token
from tests.support.cluster import FAST, past_overload
from tests.support.metrics import scrape

pytestmark = pytest.mark.cluster

C = grpc.StatusCode
SECRET = b"a1-registration-secret"
OTHER_SECRET = b"b1-registration-secret"
BINDINGS = '''
["harness-admin"]
role = "admin"

["w1"]
role = "agent"
group = "g"
pattern = "a*"

["eye"]
role = "observer"
'''


class World:
    def __init__(self, cluster: LocalCluster, tokens: dict[str, str]) -> None:
        self.cluster, self.tokens = cluster, tokens

    @property
    def tokens_file(self) -> Path:
        return Path(self.cluster.settings["auth_tokens_file"])

    def leader(self) -> str:
        return self.cluster.leader().grpc

    def digest(self) -> str:
        status = self.cluster.leader().status(timeout=5)
        assert status is not None
        return status.state_digest

    def call(self, service: str, method: str, request: Any, token: str | None) -> Any:
        """The response, or the grpc.RpcError that refused the call."""
        def attempt() -> Any:
            with grpc.insecure_channel(self.leader()) as channel:
                rpc = getattr(getattr(pb_grpc, f"{service}Stub")(channel), method)
                # A refused watch ends at once; an admitted one runs to its deadline, which
                # must still leave a loaded node time to refuse.
                result = rpc(request, timeout=5 if method != "WatchOrders" else 3, metadata=bearer(token))
                return list(result) if method in ("WatchOrders", "SaveSnapshot") else result
        try:
            return past_overload(attempt)
        except grpc.RpcError as err:
            if method == "WatchOrders" and err.code() is C.DEADLINE_EXCEEDED:
                return []  # an admitted watch that simply had nothing to send
            return err

    def refused(self, service: str, method: str, request: Any, token: str | None, code: grpc.StatusCode,
                reason: str) -> None:
        before = self.digest()
        err = self.call(service, method, request, token)
        assert isinstance(err, grpc.RpcError), f"{method} was not refused: {err}"
        assert err.code() is code, (method, err.code(), err.details())
        assert dict(err.trailing_metadata() or ()).get(REASON_METADATA_KEY) == reason, (method, err.details())
        assert self.digest() == before, f"a refused {method} changed the state"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("auth") / "cluster"
    # Plaintext: the bearer tokens are what is under test, and on a TLS cluster every
    # client's certificate would already name it (tests/cluster/test_tls.py covers that).
    cluster = LocalCluster(root, 3, settings=FAST, insecure=True)
    Path(cluster.settings["auth_bindings_file"]).write_text(BINDINGS)
    tokens_file = Path(cluster.settings["auth_tokens_file"])
    tokens = {"admin": cluster.token, "w1": add_token(tokens_file, "w1"), "eye": add_token(tokens_file, "eye")}
    with cluster.start_all():
        w = World(cluster, tokens)
        w.cluster.leader()
        assert not isinstance(w.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=3600)), tokens["admin"]),
            grpc.RpcError)
        for agent, secret in (("a1", SECRET), ("b1", OTHER_SECRET)):
            reg = w.call("AgentService", "Register", pb.RegisterRequest(
                request_id=f"reg-{agent}", group="g", agent_id=agent, secret=secret), tokens["admin"])
            assert reg.incarnation == 1, reg
        yield w


def token(secret: bytes = SECRET, incarnation: int = 1) -> pb.FencingToken:
    return pb.FencingToken(incarnation=incarnation, secret=secret)


def checkpoint(agent: str, index: int) -> pb.CheckpointMeta:
    return pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                             blob_uri=f"file:///blobs/{agent}/{index}", sha256="c" * 64, size=10)


def agent_requests(agent: str, secret: bytes = SECRET) -> list[tuple[str, str, Any]]:
    """One request of every agent RPC, acting for `agent`."""
    s = "AgentService"
    return [
        (s, "Register", pb.RegisterRequest(request_id=f"x-reg-{agent}", group="g", agent_id=agent, secret=secret)),
        (s, "Heartbeat", pb.HeartbeatRequest(group="g", agent_id=agent, token=token(secret))),
        (s, "CommitCheckpoint", pb.CommitCheckpointRequest(request_id=f"x-cp-{agent}", token=token(secret),
                                                           checkpoint=checkpoint(agent, 5))),
        (s, "ReportDependencies", pb.ReportDependenciesRequest(request_id=f"x-dep-{agent}", group="g",
                                                               agent_id=agent, token=token(secret))),
        (s, "WatchOrders", pb.WatchOrdersRequest(group="g", agent_id=agent, token=token(secret))),
        (s, "AckOrder", pb.AckOrderRequest(request_id=f"x-ack-{agent}", group="g", agent_id=agent,
                                           token=token(secret), order_id=1)),
        (s, "Deregister", pb.DeregisterRequest(request_id=f"x-dereg-{agent}", group="g", agent_id=agent,
                                               token=token(secret))),
    ]


ADMIN_REQUESTS = [
    ("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="x-cg", spec=pb.GroupSpec(group="h"))),
    ("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="x-se", group="g")),
    ("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id="x-gc", group="g")),
    ("AdminService", "DeleteGroup", pb.DeleteGroupRequest(request_id="x-dg", group="g")),
    ("AdminService", "AddNode", pb.MembershipRequest(node="127.0.0.1:1")),
    ("AdminService", "RemoveNode", pb.MembershipRequest(node="127.0.0.1:1")),
    ("AdminService", "ResetDedupeClock", pb.ResetDedupeClockRequest(request_id="x-rc")),
    ("AdminService", "SaveSnapshot", pb.SaveSnapshotRequest()),  # every group's state
    ("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(request_id="x-csp", group="g", name="x-sp")),
    ("AdminService", "DeleteSavepoint", pb.DeleteSavepointRequest(request_id="x-dsp", group="g", name="x-sp")),
    ("AdminService", "SetRetention", pb.SetRetentionRequest(request_id="x-ret", group="g",
                                                            policy=pb.RetentionPolicy(keep_last=1))),
    ("AdminService", "RestoreGroup", pb.RestoreGroupRequest(request_id="x-rg", group="g", savepoint="x-sp")),
    # A dry run too: it shows what a restore would undo, which is an admin's question.
    ("AdminService", "RestoreGroup", pb.RestoreGroupRequest(group="g", savepoint="x-sp", dry_run=True)),
    ("AdminService", "ForkGroup", pb.ForkGroupRequest(request_id="x-fg", group="g", savepoint="x-sp", into="x-fork")),
]
READ_REQUESTS = [
    ("AdminService", "GetGroup", pb.GetGroupRequest(group="g")),
    ("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g")),
    ("AdminService", "WhatIf", pb.WhatIfRequest(group="g", failed=["a1"])),
    ("AdminService", "ClusterStatus", pb.ClusterStatusRequest()),
    ("AdminService", "ListSavepoints", pb.ListSavepointsRequest(group="g")),
    ("AdminService", "ListGroups", pb.ListGroupsRequest()),
    ("AdminService", "ListDependencies", pb.ListDependenciesRequest(group="g")),
]
EVERY_RPC = [*agent_requests("a1"), *ADMIN_REQUESTS, *READ_REQUESTS]


def test_every_rpc_of_the_api_is_exercised_here() -> None:
    rpcs = {m.name for s in pb.DESCRIPTOR.services_by_name.values() for m in s.methods}
    # Session carries the agent RPCs as frames: its own tests are below.
    assert {method for _, method, _ in EVERY_RPC} | {"Session"} == rpcs


def session(world: World, token: str | None, frames: list[pb.AgentFrame]) -> list[pb.CoordinatorFrame] | grpc.RpcError:
    """Open a Session on the leader, send `frames`, half-close: every answer, or the
    grpc.RpcError that ended the stream."""
    with grpc.insecure_channel(world.leader()) as channel:
        try:
            return list(pb_grpc.AgentServiceStub(channel).Session(iter(frames), timeout=5, metadata=bearer(token)))
        except grpc.RpcError as err:
            return err


def test_a_session_without_credentials_is_unauthenticated(world: World) -> None:
    before = world.digest()
    frame = pb.AgentFrame(correlation=1, commit_checkpoint=pb.CommitCheckpointRequest(
        request_id="s-cp-anon", token=token(), checkpoint=checkpoint("a1", 7)))
    for presented in (None, "not-a-token"):
        err = session(world, presented, [frame])
        assert isinstance(err, grpc.RpcError) and err.code() is C.UNAUTHENTICATED, err
        assert dict(err.trailing_metadata() or ()).get(REASON_METADATA_KEY) == "REASON_UNAUTHENTICATED"
    assert world.digest() == before


def test_each_session_frame_is_authorized_as_its_unary_call(world: World) -> None:
    """An agent identity's session may act for its own agents only, frame by frame; an
    observer's session may write nothing; the state is unchanged by every refusal."""
    before = world.digest()
    foreign = [pb.AgentFrame(correlation=i + 1, **{kind: request}) for i, (kind, request) in enumerate([
        ("heartbeat", pb.HeartbeatRequest(group="g", agent_id="b1", token=token(OTHER_SECRET))),
        ("commit_checkpoint", pb.CommitCheckpointRequest(request_id="s-cp-b1", token=token(OTHER_SECRET),
                                                         checkpoint=checkpoint("b1", 7))),
        ("deregister", pb.DeregisterRequest(request_id="s-dereg-b1", group="g", agent_id="b1",
                                            token=token(OTHER_SECRET))),
    ])]
    answers = session(world, world.tokens["w1"], foreign)
    assert not isinstance(answers, grpc.RpcError), answers
    assert [(a.correlation, a.status.reason) for a in answers] == \
        [(f.correlation, pb.REASON_FOREIGN_AGENT) for f in foreign]
    assert all(a.status.code == C.PERMISSION_DENIED.value[0] for a in answers)
    observer = session(world, world.tokens["eye"], [pb.AgentFrame(correlation=9, commit_checkpoint=pb.CommitCheckpointRequest(
        request_id="s-cp-eye", token=token(), checkpoint=checkpoint("a1", 7)))])
    assert not isinstance(observer, grpc.RpcError) and observer[0].status.reason == pb.REASON_ROLE_FORBIDS
    forged = session(world, world.tokens["w1"], [pb.AgentFrame(correlation=3, commit_checkpoint=pb.CommitCheckpointRequest(
        request_id="s-cp-forged", token=token(b"a guess of sixteen bytes"), checkpoint=checkpoint("a1", 7)))])
    assert not isinstance(forged, grpc.RpcError) and forged[0].status.reason == pb.REASON_WRONG_AGENT_SECRET
    assert world.digest() == before
    # Its own agent, with its secret: the frame goes through.
    own = session(world, world.tokens["w1"], [pb.AgentFrame(correlation=4, heartbeat=pb.HeartbeatRequest(
        group="g", agent_id="a1", token=token()))])
    assert not isinstance(own, grpc.RpcError) and own[0].WhichOneof("body") == "heartbeat", own


@pytest.mark.parametrize("service,method,request_", EVERY_RPC, ids=[m for _, m, _ in EVERY_RPC])
def test_no_credentials_or_an_unknown_token_is_unauthenticated(world: World, service: str, method: str,
                                                                request_: Any) -> None:
    world.refused(service, method, request_, None, C.UNAUTHENTICATED, "REASON_UNAUTHENTICATED")
    world.refused(service, method, request_, "not-a-token", C.UNAUTHENTICATED, "REASON_UNAUTHENTICATED")


WRITES = [*agent_requests("a1"), *ADMIN_REQUESTS]


@pytest.mark.parametrize("service,method,request_", WRITES, ids=[m for _, m, _ in WRITES])
def test_an_observer_may_not_write(world: World, service: str, method: str, request_: Any) -> None:
    world.refused(service, method, request_, world.tokens["eye"], C.PERMISSION_DENIED, "REASON_ROLE_FORBIDS")


FOREIGN = agent_requests("b1", OTHER_SECRET)


@pytest.mark.parametrize("service,method,request_", FOREIGN, ids=[m for _, m, _ in FOREIGN])
def test_an_agent_identity_may_not_act_for_a_foreign_agent(world: World, service: str, method: str,
                                                            request_: Any) -> None:
    """Even holding b1's secret: the binding covers agents a* only."""
    world.refused(service, method, request_, world.tokens["w1"], C.PERMISSION_DENIED, "REASON_FOREIGN_AGENT")


@pytest.mark.parametrize("service,method,request_", ADMIN_REQUESTS, ids=[m for _, m, _ in ADMIN_REQUESTS])
def test_an_agent_identity_may_not_administer(world: World, service: str, method: str, request_: Any) -> None:
    world.refused(service, method, request_, world.tokens["w1"], C.PERMISSION_DENIED, "REASON_ROLE_FORBIDS")


def test_an_admin_saves_a_snapshot(world: World) -> None:
    """The admin's counterpart of the refusals above (SaveSnapshot is in ADMIN_REQUESTS)."""
    parts = world.call("AdminService", "SaveSnapshot", pb.SaveSnapshotRequest(), world.tokens["admin"])
    assert not isinstance(parts, grpc.RpcError), parts
    assert [p.WhichOneof("part") for p in (parts[0], parts[-1])] == ["saved", "sha256"], parts[0]


@pytest.mark.parametrize("service,method,request_", READ_REQUESTS, ids=[m for _, m, _ in READ_REQUESTS])
def test_an_observer_reads(world: World, service: str, method: str, request_: Any) -> None:
    assert not isinstance(world.call(service, method, request_, world.tokens["eye"]), grpc.RpcError)


def test_the_agent_identity_writes_for_its_own_agents(world: World) -> None:
    beat = world.call("AgentService", "Heartbeat", pb.HeartbeatRequest(group="g", agent_id="a1", token=token()),
                      world.tokens["w1"])
    assert not isinstance(beat, grpc.RpcError), beat
    done = world.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
        request_id="own-cp-1", token=token(), checkpoint=checkpoint("a1", 1)), world.tokens["w1"])
    assert not isinstance(done, grpc.RpcError), done
    err = world.call("AdminService", "GetGroup", pb.GetGroupRequest(group="other"), world.tokens["w1"])
    assert isinstance(err, grpc.RpcError) and err.code() is C.PERMISSION_DENIED
    # Listing groups would name the other groups too.
    world.refused("AdminService", "ListGroups", pb.ListGroupsRequest(), world.tokens["w1"], C.PERMISSION_DENIED,
                  "REASON_FOREIGN_AGENT")
    assert not isinstance(world.call("AdminService", "ListSavepoints", pb.ListSavepointsRequest(group="g"),
                                     world.tokens["w1"]), grpc.RpcError)


FORGED = [r for r in agent_requests("a1", b"guessed-the-secret!") if r[1] != "Register"]


@pytest.mark.parametrize("service,method,request_", FORGED, ids=[m for _, m, _ in FORGED])
def test_knowing_the_incarnation_is_not_enough_to_act_as_the_agent(world: World, service: str, method: str,
                                                                  request_: Any) -> None:
    """Even an identity allowed to act for a1 (here the admin) must hold a1's secret."""
    world.refused(service, method, request_, world.tokens["admin"], C.PERMISSION_DENIED,
                  "REASON_WRONG_AGENT_SECRET")


def test_a_registration_without_a_long_enough_secret_is_refused(world: World) -> None:
    for secret in (b"", b"short"):
        world.refused("AgentService", "Register", pb.RegisterRequest(
            request_id=f"nosecret-{len(secret)}", group="g", agent_id="a9", secret=secret), world.tokens["w1"],
            C.INVALID_ARGUMENT, "REASON_INVALID_FIELD")


def test_reads_never_show_the_secret_or_its_hash(world: World) -> None:
    shown = b"".join(world.call(s, m, r, world.tokens["admin"]).SerializeToString() for s, m, r in READ_REQUESTS)
    for secret in (SECRET, OTHER_SECRET):
        for form in (secret, hashlib.sha256(secret).digest(), hashlib.sha256(secret).hexdigest().encode()):
            assert form not in shown


def test_a_rotated_token_is_refused_once_the_file_changes_without_a_restart(world: World) -> None:
    old = add_token(world.tokens_file, "rotating")
    Path(world.cluster.settings["auth_bindings_file"]).write_text(BINDINGS + '\n["rotating"]\nrole = "observer"\n')
    request = pb.GetGroupRequest(group="g")
    wait_for(lambda: not isinstance(world.call("AdminService", "GetGroup", request, old), grpc.RpcError),
             "the new token to be accepted", 10)
    new = add_token(world.tokens_file, "rotating")  # replaces the identity's old token
    world.refused("AdminService", "GetGroup", request, old, C.UNAUTHENTICATED, "REASON_UNAUTHENTICATED")
    assert not isinstance(world.call("AdminService", "GetGroup", request, new), grpc.RpcError)
    lines = [ln for ln in world.tokens_file.read_text().splitlines() if not ln.startswith(("rotating", "#"))]
    world.tokens_file.write_text("\n".join(lines) + "\n")  # revoked
    world.refused("AdminService", "GetGroup", request, new, C.UNAUTHENTICATED, "REASON_UNAUTHENTICATED")


def test_a_typo_in_the_auth_files_leaves_the_last_good_version_in_force(world: World) -> None:
    """The files every node reads, broken at once: agents keep heartbeating, the admin
    keeps reading, and each node says the file is unusable; fixed, they are used again."""
    bindings, tokens = Path(world.cluster.settings["auth_bindings_file"]), world.tokens_file
    good_bindings, good_tokens = bindings.read_text(), tokens.read_text()
    heartbeat = pb.HeartbeatRequest(group="g", agent_id="a1", token=token())
    status = pb.ClusterStatusRequest()
    try:
        bindings.write_text(good_bindings + '\n["typo"\nrole = admin\n')
        tokens.write_text(good_tokens + "half a line\n")
        for _ in range(3):  # each node reads the files at its next call
            answer = world.call("AgentService", "Heartbeat", heartbeat, world.tokens["w1"])
            assert not isinstance(answer, grpc.RpcError), f"a typo refused an agent's heartbeat: {answer}"
            answer = world.call("AdminService", "ClusterStatus", status, world.tokens["admin"])
            assert not isinstance(answer, grpc.RpcError), f"a typo locked the admin out: {answer}"
        leader = next(n for n in world.cluster.nodes if n.grpc == world.leader())
        shown = f'raftpoint_auth_file_unusable{{file="{bindings}"}}'
        assert scrape(leader.metrics).get(shown) == 1.0, f"the leader does not show the broken file: {shown}"
    finally:
        bindings.write_text(good_bindings)
        tokens.write_text(good_tokens)
    assert not isinstance(world.call("AgentService", "Heartbeat", heartbeat, world.tokens["w1"]), grpc.RpcError)


def test_a_token_revoked_while_its_session_is_open_refuses_the_next_frame(world: World) -> None:
    """A session derives its caller once and again only when the tokens file changes
    (auth.SessionCaller): the frame after the token was revoked is refused, on the same
    stream, and the one before it was served."""
    identity = "revoked-mid-session"
    bindings = Path(world.cluster.settings["auth_bindings_file"])
    bindings.write_text(BINDINGS + f'\n["{identity}"]\nrole = "agent"\ngroup = "g"\npattern = "a*"\n')
    presented = add_token(world.tokens_file, identity)
    first_answered, revoked = threading.Event(), threading.Event()

    def heartbeat(correlation: int) -> pb.AgentFrame:
        return pb.AgentFrame(correlation=correlation, heartbeat=pb.HeartbeatRequest(
            group="g", agent_id="a1", token=token()))

    def frames() -> Iterator[pb.AgentFrame]:
        yield heartbeat(1)
        if first_answered.wait(10):
            kept = [ln for ln in world.tokens_file.read_text().splitlines() if not ln.startswith(identity)]
            world.tokens_file.write_text("\n".join(kept) + "\n")
            revoked.set()
            yield heartbeat(2)

    answers: list[pb.CoordinatorFrame] = []
    with grpc.insecure_channel(world.leader()) as channel:
        for answer in pb_grpc.AgentServiceStub(channel).Session(frames(), timeout=15, metadata=bearer(presented)):
            answers.append(answer)
            first_answered.set()
    assert revoked.is_set(), answers
    assert [a.correlation for a in answers] == [1, 2], answers
    assert answers[0].WhichOneof("body") == "heartbeat", answers[0]
    assert answers[1].WhichOneof("body") == "status", answers[1]
    assert (answers[1].status.code, answers[1].status.reason) == (C.UNAUTHENTICATED.value[0],
                                                                  pb.REASON_UNAUTHENTICATED), answers[1]


def test_an_agent_library_session_presents_its_token(world: World, tmp_path: Path) -> None:
    plain = world.cluster.client_tls()  # this cluster runs plaintext (see the fixture)
    with connect(world.cluster.endpoints(), token=world.tokens["w1"], data_dir=tmp_path, deadline=10, tls=plain) as rp:
        with rp.group("g").agent("a2", state={"n": 0}) as agent:
            assert agent.checkpoint({"n": 1}) >= 1
    with connect(world.cluster.endpoints(), token=world.tokens["eye"], data_dir=tmp_path, deadline=10, tls=plain) as rp:
        with pytest.raises(Rejected) as refused:
            rp.group("g").agent("a3", state={}).start()
        assert refused.value.reason_name == "REASON_ROLE_FORBIDS"


def test_two_identities_sending_one_request_id_each_have_their_command_applied(world: World) -> None:
    """Each identity's request ids are its own, on every node: the identity each node
    keys the answer by comes from the log entry."""
    for who, agent in (("admin", "a-ids-1"), ("w1", "a-ids-2")):
        reg = world.call("AgentService", "Register", pb.RegisterRequest(
            request_id="one-id", group="g", agent_id=agent, secret=SECRET), world.tokens[who])
        assert not isinstance(reg, grpc.RpcError) and reg.incarnation == 1, reg
    group = world.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g"), world.tokens["admin"])
    assert {"a-ids-1", "a-ids-2"} <= {a.agent_id for a in group.agents}, f"a registration was skipped: {group}"
    world.cluster.converged()
