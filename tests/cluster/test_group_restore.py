"""Group restores on a running three-node cluster, with real agents (agent_client):
the group goes back to a savepoint, each agent's restored state is its state at the
savepoint, a message sent after it is refused as an orphan, a restore racing an
agent's crash ends at the same line whichever the log applied first, and the
`raftpoint restore` and `raftpoint whatif` commands."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agent_client.agent import AgentClient
from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import Client
from tests.support.tls import cli_tls

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
Capture = pytest.CaptureFixture[str]
OPEN: list[AgentClient] = []


@pytest.fixture(autouse=True)
def close_agents() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def agent(cluster: LocalCluster, blobs: Path, group: str, name: str, members: tuple[str, ...] = ()) -> AgentClient:
    """An agent that carries out its orders only when the test says (obey); `members`:
    the fixed member list HMNR and FDAS need."""
    client = AgentClient(group, name, cluster.endpoints(), blobs, token=cluster.token, tls=cluster.client_tls(),
                         snapshot=lambda: b"", background=False, members=members)
    OPEN.append(client)
    client.register()
    return client


def saved_then_moved_on(client: Client, cluster: LocalCluster, blobs: Path, group: str):
    """a and b checkpoint and exchange a message; savepoint s holds a at 2 and b at 2; then
    they go on (a message each way, a checkpoint each), b's last message still in flight."""
    client.create_group(group, mode=pb.CIC_BCS)
    a, b = agent(cluster, blobs, group, "a"), agent(cluster, blobs, group, "b")
    a.checkpoint(b"a at 1")
    b.checkpoint(b"b at 1")
    assert b.unwrap(a.wrap(b"m1", to="b")) == b"m1"
    a.checkpoint(b"a at 2")
    b.checkpoint(b"b at 2")
    saved = client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id=f"sp-{group}", group=group, name="s")).savepoint
    assert [(s.agent_id, s.index) for s in saved.checkpoints] == [("a", 2), ("b", 2)]
    assert b.unwrap(a.wrap(b"m2", to="b")) == b"m2"
    a.checkpoint(b"a at 3")
    b.checkpoint(b"b at 3")
    in_flight = b.wrap(b"m3 after the savepoint", to="a")
    return a, b, in_flight


def obey_all(agent_client: AgentClient) -> list:
    return [agent_client.obey(order) for order in agent_client.pending_orders()]


def group_state(client: Client, group: str) -> int:
    return client.call("AdminService", "GetGroup", pb.GetGroupRequest(group=group)).group.state


def test_a_group_goes_back_to_its_savepoint_and_a_later_message_is_an_orphan(
        shared_cluster: LocalCluster, shared_client: Client, tmp_path: Path) -> None:
    a, b, in_flight = saved_then_moved_on(shared_client, shared_cluster, tmp_path / "blobs", "r1")
    request = pb.RestoreGroupRequest(request_id="restore-r1", group="r1", savepoint="s")
    planned = shared_client.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
        group="r1", savepoint="s", dry_run=True))
    assert planned.dry_run and planned.recovery_id == 0 and group_state(shared_client, "r1") == pb.RUNNING
    done = shared_client.call("AdminService", "RestoreGroup", request)
    assert list(done.steps) == list(planned.steps) and done.recovery_id > 0
    assert [(s.agent_id, s.checkpoint_index, list(s.checkpoints_lost)) for s in done.steps] == [
        ("a", 2, [3]), ("b", 2, [3])]
    assert shared_client.call("AdminService", "RestoreGroup", request) == done  # a retry: the same recovery
    [restored_a], [restored_b] = obey_all(a), obey_all(b)
    assert (restored_a.index, restored_a.state) == (2, b"a at 2"), restored_a
    assert (restored_b.index, restored_b.state) == (2, b"b at 2"), restored_b
    assert group_state(shared_client, "r1") == pb.RUNNING
    assert shared_client.checkpoints("r1") == [1, 2, 1, 2]
    assert a.unwrap(in_flight) is None and a.orphans == 1  # sent after the savepoint: undone
    assert b.unwrap(a.wrap(b"after the restore", to="b")) == b"after the restore"


def test_running_agents_carry_out_a_restore_by_themselves(shared_cluster: LocalCluster, shared_client: Client,
                                                          tmp_path: Path) -> None:
    """Agents with their background threads: the restore's orders are pushed to them, and
    each hands its savepoint state to on_rollback and acknowledges, with no call from the test."""
    shared_client.create_group("bg", mode=pb.CIC_BCS)
    rolled: dict[str, list] = {}

    def running(name: str) -> AgentClient:
        client = AgentClient("bg", name, shared_cluster.endpoints(), tmp_path / "blobs", token=shared_cluster.token,
                             tls=shared_cluster.client_tls(), snapshot=lambda: b"", background=True,
                             on_rollback=lambda state, reason: rolled.setdefault(name, []).append(state))
        OPEN.append(client)
        client.register()
        return client

    a, b = running("a"), running("b")
    a.checkpoint(b"a at 1")
    b.checkpoint(b"b at 1")
    shared_client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id="sp-bg", group="bg", name="s"))
    a.checkpoint(b"a at 2")
    b.checkpoint(b"b at 2")
    shared_client.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
        request_id="restore-bg", group="bg", savepoint="s"))
    deadline = time.monotonic() + 15
    while not (len(rolled) == 2 and group_state(shared_client, "bg") == pb.RUNNING):
        assert time.monotonic() < deadline, f"after 15 s the agents rolled back to {rolled}"
        time.sleep(0.05)
    assert rolled == {"a": [b"a at 1"], "b": [b"b at 1"]}
    assert (a.last_index, b.last_index) == (1, 1)


@pytest.mark.parametrize("crash_first", [True, False], ids=["crash-then-restore", "restore-racing-crash"])
def test_a_restore_racing_an_agents_crash_ends_at_the_savepoint(
        shared_cluster: LocalCluster, shared_client: Client, tmp_path: Path, crash_first: bool) -> None:
    """a restarts (its old incarnation counts as crashed: a failure recovery) while the
    restore is sent; the log applies them in some order and both agents end at the savepoint."""
    group = f"race-{crash_first}"
    a, b, _ = saved_then_moved_on(shared_client, shared_cluster, tmp_path / "blobs", group)
    restarted = AgentClient(group, "a", shared_cluster.endpoints(), tmp_path / "blobs", token=shared_cluster.token,
                            tls=shared_cluster.client_tls(), snapshot=lambda: b"", background=False)
    OPEN.append(restarted)
    restore = threading.Thread(target=shared_client.call, args=("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
        request_id=f"restore-{group}", group=group, savepoint="s")))
    if crash_first:
        restarted.register()
        restore.start()
    else:
        restore.start()
        restarted.register()
    restore.join(timeout=20)
    assert not restore.is_alive(), "RestoreGroup did not answer within 20 s"
    # Where Register said to resume (3 if the crash came first), then each order it finds.
    # An order is answered None when the agent is already where it says.
    a_states = [s for s in (restarted.restore(), *obey_all(restarted)) if s is not None]
    b_states = [s for s in obey_all(b) if s is not None]
    assert (a_states[-1].index, a_states[-1].state) == (2, b"a at 2"), a_states
    assert b_states and (b_states[-1].index, b_states[-1].state) == (2, b"b at 2"), b_states
    deadline = time.monotonic() + 10
    while group_state(shared_client, group) != pb.RUNNING:
        assert time.monotonic() < deadline, f"group {group} still recovering: {obey_all(restarted)} {obey_all(b)}"
        obey_all(restarted) or obey_all(b) or time.sleep(0.05)
    assert shared_client.checkpoints(group) == [1, 2, 1, 2]


def test_a_restore_across_a_leader_kill_is_one_recovery(cluster: LocalCluster, client: Client,
                                                         tmp_path: Path) -> None:
    """The leader is killed as the restore is sent: the client retries the same request on
    the next leader, and the group has made exactly one recovery, the restore's."""
    a, b, _ = saved_then_moved_on(client, cluster, tmp_path / "blobs", "lk")
    answers: list = []
    restore = threading.Thread(target=lambda: answers.append(client.call("AdminService", "RestoreGroup",
                                                                         pb.RestoreGroupRequest(
        request_id="restore-lk", group="lk", savepoint="s"))))
    restore.start()
    cluster.kill(cluster.leader().index)
    restore.join(timeout=30)
    assert answers, "RestoreGroup did not answer within 30 s of the leader kill"
    group = client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="lk")).group
    assert group.recovery_id == answers[0].recovery_id == 1, (group, answers)
    [restored_a], [restored_b] = obey_all(a), obey_all(b)
    assert (restored_a.state, restored_b.state) == (b"a at 2", b"b at 2")
    assert group_state(client, "lk") == pb.RUNNING


@pytest.fixture
def where(shared_cluster: LocalCluster) -> list[str]:
    return ["--endpoints", ",".join(shared_cluster.endpoints()), *cli_tls(shared_cluster)]


def test_restore_and_whatif_commands(shared_cluster: LocalCluster, shared_client: Client, tmp_path: Path,
                                     where: list[str], capsys: Capture) -> None:
    a, b, _ = saved_then_moved_on(shared_client, shared_cluster, tmp_path / "blobs", "cli")
    assert raftpoint(["whatif", "cli", "--fail", "a", *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "if a failed now, group cli would roll back:" and out[1].split() == ["AGENT", "BACK", "TO",
                                                                                         "INTERVALS", "LOST"]
    assert raftpoint(["restore", "cli", "--savepoint", "s", "--dry-run", *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dry run: restoring group cli to savepoint s would roll back"), out
    # m2 (a to b, after the savepoint) is undone at both ends; m3 was never delivered.
    assert out[2].split() == ["a", "2", "2", "3", "1", "0"] and out[3].split() == ["b", "2", "2", "3", "0", "1"], out
    assert raftpoint(["restore", "cli", "--containing", "a:3", "--dry-run", "--json", *where]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["dry_run"] and [(s["agent_id"], s["checkpoint_index"]) for s in answer["steps"]] == [
        ("a", 3), ("b", 3)]
    assert group_state(shared_client, "cli") == pb.RUNNING  # dry runs changed nothing

    for argv, code, words in [
        (["restore", "cli", "--savepoint", "nope"], 1, ("savepoint 'nope'", "does not exist")),
        (["restore", "cli", "--containing", "a:9"], 1, ("no stable checkpoint 9",)),
        (["restore", "cli", "--containing", "a"], 2, ("expected AGENT:INDEX",)),
        (["restore", "nogroup", "--savepoint", "s"], 1, ("group 'nogroup' does not exist",)),
    ]:
        assert raftpoint([*argv, *where]) == code, argv
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err and not captured.out, (argv, captured)
        assert all(w in err for w in words), (argv, err)

    assert raftpoint(["restore", "cli", "--savepoint", "s", *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("group cli is restoring to savepoint s as recovery "), out
    assert group_state(shared_client, "cli") == pb.RECOVERING
    with pytest.raises(grpc.RpcError) as refused:  # the API's refusal names its reason
        shared_client.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
            request_id="restore-cli-bad", group="cli", containing=[pb.SavedCheckpoint(agent_id="a", index=3)]))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(refused.value.trailing_metadata() or ()).get(REASON_METADATA_KEY) == "REASON_NO_RESTORE_LINE"


@pytest.mark.parametrize("mode", [pb.CIC_BCS, pb.CIC_HMNR, pb.CIC_FDAS, pb.UNCOORDINATED],
                         ids=["bcs", "hmnr", "fdas", "uncoordinated"])
def test_each_mode_goes_back_to_the_savepoint_with_no_orphan(
        shared_cluster: LocalCluster, shared_client: Client, tmp_path: Path, mode: int) -> None:
    """Three agents pass messages around a ring and checkpoint in turn; after a savepoint
    they go on; the restore brings every agent back to exactly what it wrote at the
    savepoint's checkpoint (forced checkpoints, which the library takes itself in CIC
    modes, hold the snapshot: empty here), and a message sent after it is refused."""
    group = f"each-{pb.GroupMode.Name(mode).lower().replace('_', '-')}"
    shared_client.create_group(group, mode=mode)
    names = ("a", "b", "c")
    agents = {n: agent(shared_cluster, tmp_path / "blobs", group, n, members=names) for n in names}
    written: dict[str, dict[int, bytes]] = {n: {} for n in names}

    def round_of_work(label: str) -> None:
        for sender, receiver in zip(names, names[1:] + names[:1]):
            payload = f"{label} {sender}->{receiver}".encode()
            assert agents[receiver].unwrap(agents[sender].wrap(payload, to=receiver)) == payload
            state = f"{sender} after {label}".encode()
            written[sender][agents[sender].checkpoint(state)] = state

    round_of_work("one")
    round_of_work("two")
    saved = shared_client.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id=f"sp-{group}", group=group, name="s")).savepoint
    line = {c.agent_id: c.index for c in saved.checkpoints}
    round_of_work("three")
    in_flight = agents["a"].wrap(b"sent after the savepoint", to="b")
    shared_client.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
        request_id=f"restore-{group}", group=group, savepoint="s"))
    for name in names:
        [restored] = obey_all(agents[name])
        expected = written[name].get(line[name], b"")  # not written by the test: a forced checkpoint
        assert (restored.index, restored.state) == (line[name], expected), (name, line, restored)
    assert agents["b"].unwrap(in_flight) is None and agents["b"].orphans == 1, "a send after the savepoint arrived"
    assert group_state(shared_client, group) == pb.RUNNING
