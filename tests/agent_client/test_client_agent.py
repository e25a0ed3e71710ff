"""AgentClient against the in-process coordinator: messages, checkpoints, restores, orders."""
from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest

from agent_client.agent import AgentClient, RestoreKind
from agent_client.aio import AsyncAgentClient
from agent_client.connection import Connection, Rejected
from agent_client.delivery_log import DeliveryLog
from agent_client.restore_check import RejectReason
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import wait_for


OPEN: list[AgentClient] = []


@pytest.fixture
def coordinator() -> Iterator[InProcessCoordinator]:
    with InProcessCoordinator() as c:
        yield c
        while OPEN:  # open watch streams would hold the server's shutdown for its grace period
            OPEN.pop().close()


@pytest.fixture
def admin(coordinator: InProcessCoordinator) -> Iterator[Connection]:
    with Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        yield conn


def group_running(admin: Connection) -> bool:
    return admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group.state == pb.RUNNING


def make_group(admin: Connection, mode: int, group: str = "g") -> None:
    admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
        group=group, mode=mode, lease_ttl_s=30, checkpoint_interval_s=3600)))


class Agent:
    """A tiny agent: a dict state, its client, and what rollbacks told it."""

    def __init__(self, coordinator: InProcessCoordinator, tmp: Path, name: str, **kw: Any) -> None:
        self.state: dict[str, Any] = {"name": name, "got": []}
        self.rollbacks: list[tuple[Any, str]] = []
        self.client = AgentClient("g", name, [coordinator.address], tmp / "blobs", tls=coordinator.client_tls(), snapshot=lambda: dict(self.state),
                                  on_rollback=self._rolled_back, **kw)
        OPEN.append(self.client)
        self.client.register()

    def _rolled_back(self, state: Any, reason: str) -> None:
        self.rollbacks.append((state, reason))
        self.state = dict(state) if state is not None else {"name": self.state["name"], "got": []}


def test_duplicated_and_reordered_envelopes_are_delivered_once(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.UNCOORDINATED)
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    envelopes = [a.client.wrap(f"m{i}".encode(), to="b") for i in range(20)]
    stream = envelopes * 3
    random.Random(4).shuffle(stream)
    delivered = [p for p in (b.client.unwrap(e) for e in stream) if p is not None]
    assert sorted(delivered) == sorted(f"m{i}".encode() for i in range(20))
    deps = admin.call("AdminService", "WhatIf", pb.WhatIfRequest(group="g", failed=["a"]))
    assert {t.agent_id for t in deps.targets} == {"a", "b"}  # b's receives were reported: it depends on a


def test_bcs_forces_a_checkpoint_before_delivery(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    a.client.checkpoint()
    a.client.checkpoint()
    payload = b.client.unwrap(a.client.wrap(b"tokens", to="b"))
    b.state["got"].append(payload.decode())  # delivered after the forced checkpoint was taken
    cps = admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", agent_id="b")).checkpoints
    assert [(c.index, c.kind) for c in cps] == [(2, pb.FORCED)] and b.client.forced == 1
    restored = b.client.restore(cps[0])
    assert restored.state == {"name": "b", "got": []}  # the forced checkpoint precedes the delivery


def test_zombie_incarnation_is_fenced(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)
    old = Agent(coordinator, tmp_path, "a", keepalive_interval=0.2)
    old.client.checkpoint()
    new = Agent(coordinator, tmp_path, "a")
    assert new.client.incarnation == old.client.incarnation + 1
    with pytest.raises(Rejected) as info:
        old.client.checkpoint()
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION and "incarnation" in info.value.reason
    wait_for(lambda: old.client.fenced, "the zombie's heartbeat to learn it is fenced", 10)


def test_rejected_restores_say_why(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.UNCOORDINATED)
    a = Agent(coordinator, tmp_path, "a", background=False)
    a.state["big"] = "x" * 200_000
    a.client.checkpoint()
    meta = admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g")).checkpoints[0]
    assert a.client.restore(meta).state["big"] == a.state["big"]
    other_schema = AgentClient("g", "a", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(), snapshot=dict, schema_version=2,
                               background=False)
    other_config = AgentClient("g", "a", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(), snapshot=dict,
                               config={"model": "other"}, background=False)
    assert other_schema.restore(meta).rejected is RejectReason.SCHEMA_MISMATCH
    assert other_config.restore(meta).rejected is RejectReason.CONFIG_MISMATCH
    for chunk in (tmp_path / "blobs" / "packs").rglob("*"):
        if chunk.is_file():
            chunk.write_bytes(b"bit rot")
    restored = a.client.restore(meta)
    assert restored.kind is RestoreKind.REJECTED and restored.rejected is RejectReason.DIGEST_MISMATCH
    assert restored.state is None and restored.reason.startswith("rejected: digest mismatch") and "chunk" in restored.reason


def test_cold_start_then_resume(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)
    a = Agent(coordinator, tmp_path, "a")
    assert a.client.restore().kind is RestoreKind.COLD_START
    a.state["n"] = 7
    a.client.checkpoint()
    again = Agent(coordinator, tmp_path, "a")
    restored = again.client.restore()
    assert restored.kind is RestoreKind.RESUME and restored.state["n"] == 7 and restored.index == 1
    again.client.sync_orders()
    again.client.checkpoint()  # writes are accepted once the restart's rollback order is acknowledged


def test_rollback_order_reaches_a_running_agent(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    b.client.checkpoint()
    a.client.checkpoint()
    b.state["got"].append(b.client.unwrap(a.client.wrap(b"x", to="b")).decode())
    restarted = Agent(coordinator, tmp_path, "a")  # a crashed: its send is undone, b must forget the receive
    restarted.client.restore()
    restarted.client.sync_orders()
    wait_for(lambda: b.rollbacks, "b's order watcher to roll it back", 10)
    state, reason = b.rollbacks[0]
    assert state == {"name": "b", "got": []} and reason.startswith("rollback order") and b.state["got"] == []
    wait_for(lambda: group_running(admin), "the group to finish recovering", 10)


def test_before_ack_sees_the_rollback_carried_out_and_not_yet_acknowledged(coordinator, admin, tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    seen: list[tuple[int, list[tuple[str, int]], int, str]] = []

    def before_ack(order: pb.Order) -> None:
        group = admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group
        seen.append((order.roll_back.recovery_id, [(t.agent_id, t.checkpoint_index) for t in order.roll_back.line],
                     len(b.rollbacks), pb.GroupState.Name(group.state)))
        if len(seen) == 1:
            raise RuntimeError("the agent dies here, its rollback not acknowledged")

    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b", before_ack=before_ack)
    b.client.checkpoint()
    a.client.checkpoint()
    b.client.unwrap(a.client.wrap(b"x", to="b"))
    restarted = Agent(coordinator, tmp_path, "a")
    restarted.client.restore()
    restarted.client.sync_orders()
    wait_for(lambda: len(seen) >= 2, "b's order watcher to try the rollback again", 10)
    # Restored and handed to on_rollback, then the hook, with the group still waiting for b's acknowledgement;
    # a hook that raises leaves the order unacknowledged, and the watcher carries it out again.
    assert seen[0] == (1, [("a", 1), ("b", 1)], 1, "RECOVERING")
    wait_for(lambda: group_running(admin), "b's acknowledgement", 10)


def test_coordinated_epoch_cut_by_orders_and_by_messages(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.COORDINATED)
    a = Agent(coordinator, tmp_path, "a")
    b = Agent(coordinator, tmp_path, "b", background=False)  # b learns of the epoch only from a's message
    early = a.client.wrap(b"sent before a's cut", to="b")
    admin.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id="e1", group="g"))
    wait_for(lambda: a.client.cut_epoch == 1, "a to cut for epoch 1 on its order", 10)
    assert b.client.unwrap(a.client.wrap(b"after a's cut", to="b")) == b"after a's cut"
    assert b.client.cut_epoch == 1 and b.client.forced == 1  # cut before delivering
    assert b.client.unwrap(early) == b"sent before a's cut"  # crossed the cut in transit: channel state
    assert [e.envelope.message_id for e in b.client.in_transit(b.client.last_index)] != []
    group = admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).group
    assert group.stable_epoch == 1


def test_side_effects_run_once_across_restarts(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)
    calls: list[str] = []
    a = Agent(coordinator, tmp_path, "a")
    assert a.client.side_effect("email-1", lambda: calls.append("sent") or "ok") == "ok"
    a.client.close()
    again = Agent(coordinator, tmp_path, "a")
    assert again.client.side_effect("email-1", lambda: calls.append("again") or "ok") == "ok"
    assert calls == ["sent"]
    again.client.restore()
    again.client.sync_orders()
    held = again.client.side_effect("payment-1", lambda: calls.append("paid") or 1, hold_until_stable=True)
    assert held is None and calls == ["sent"]  # held until the covering checkpoint is stable
    again.client.checkpoint()
    assert calls == ["sent", "paid"]


def test_async_client(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_BCS)

    async def main() -> Any:
        async with AsyncAgentClient("g", "x", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(),
                                    snapshot=lambda: {"v": 1}) as client:
            await client.register()
            await client.checkpoint()
            return await client.unwrap(client.wrap(b"self", to="x"))

    assert asyncio.run(main()) == b"self"


def test_fdas_forces_after_a_send_and_records_the_kind(coordinator, admin, tmp_path: Path) -> None:
    make_group(admin, pb.CIC_FDAS)
    a = Agent(coordinator, tmp_path, "a", members=["a", "b"])
    b = Agent(coordinator, tmp_path, "b", members=["a", "b"])
    a.client.checkpoint()
    b.client.wrap(b"b sends first", to="a")  # fixes b's dependency vector for this interval
    assert b.client.unwrap(a.client.wrap(b"new dependency", to="b")) == b"new dependency"
    cps = admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", agent_id="b")).checkpoints
    assert [(c.index, c.kind) for c in cps] == [(1, pb.FORCED)] and b.client.forced == 1


class Holder:
    """An agent holding tokens; a message moves tokens. Sync or asyncio client."""

    def __init__(self, coordinator: InProcessCoordinator, tmp: Path, name: str, *, aio: bool = False,
                 **kw: Any) -> None:
        self.name, self.tokens = name, 10
        cls = AsyncAgentClient if aio else AgentClient
        self.client = cls("g", name, [coordinator.address], tmp / "blobs", tls=coordinator.client_tls(), snapshot=lambda: {"tokens": self.tokens},
                          on_rollback=self._rolled_back, on_redeliver=self._redelivered, **kw)
        if not aio:
            OPEN.append(self.client)
            self.client.register()

    def _rolled_back(self, state: Any, reason: str) -> None:
        self.tokens = state["tokens"] if state else 10

    def _redelivered(self, payload: bytes, sender: str) -> None:
        self.tokens += int(payload)

    def send(self, to: str, amount: int) -> bytes:
        with self.client.atomic():
            self.tokens -= amount
            return self.client.wrap(str(amount).encode(), to)

    def receive(self, envelope: bytes) -> bool:
        with self.client.atomic():
            payload = self.client.unwrap(envelope)
            if payload is not None:
                self.tokens += int(payload)
            return payload is not None

    def restart(self, coordinator: InProcessCoordinator, tmp: Path) -> "Holder":
        """A crash: a new process with the same name, resuming from its checkpoint."""
        again = Holder(coordinator, tmp, self.name)
        with again.client.atomic():
            again._rolled_back(again.client.restore().state, "resume")
            again.client.sync_orders()
        return again


def test_an_in_flight_message_from_a_rolled_back_sender_is_not_delivered(coordinator, admin, tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b = Holder(coordinator, tmp_path, "a"), Holder(coordinator, tmp_path, "b")
    a.client.checkpoint()
    in_flight = a.send("b", 4)  # sent in a's interval 2, after its checkpoint
    a = a.restart(coordinator, tmp_path)  # a crashes: the send is undone, a has its 10 tokens back
    assert a.tokens == 10
    assert not b.receive(in_flight)  # delivering it would make an orphan
    assert b.client.orphans == 1 and b.tokens == 10 and a.tokens + b.tokens == 20
    assert b.receive(a.send("b", 4)) and a.tokens + b.tokens == 20  # the new generation's messages flow


def test_a_restarted_receiver_redelivers_what_its_sender_will_not_send_again(coordinator, admin, tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b = Holder(coordinator, tmp_path, "a"), Holder(coordinator, tmp_path, "b")
    b.client.checkpoint()
    envelopes = [a.send("b", n) for n in (1, 2, 3)]
    assert all(b.receive(e) for e in envelopes) and b.tokens == 16
    b = b.restart(coordinator, tmp_path)  # b lost the three receives; a keeps running
    assert b.tokens == 16 and a.tokens + b.tokens == 20 and len(b.client.redelivered) == 3
    wait_for(lambda: group_running(admin), "b's recovery to finish", 10)  # an order for a would be done by now
    assert not a.client.rollbacks
    assert not any(b.receive(e) for e in envelopes)  # the network's copies are duplicates now


def test_a_running_agent_rolled_back_by_another_failure_redelivers_only_kept_sends(coordinator, admin,
                                                                                   tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b, c = (Holder(coordinator, tmp_path, n) for n in "abc")
    b.client.checkpoint()
    c.client.checkpoint()
    assert b.receive(a.send("b", 2)) and b.receive(c.send("b", 3)) and b.tokens == 15
    c = c.restart(coordinator, tmp_path)  # c's send is undone: b must forget it, but not a's
    wait_for(lambda: b.client.rollbacks and group_running(admin), "b's order watcher to roll it back", 10)
    with b.client.atomic():
        assert b.tokens == 12 and c.tokens == 10 and a.tokens == 8  # 30 in all
        assert [m.split(".")[0] for m, _ in b.client.redelivered] == ["a"]
    assert not a.client.rollbacks


def test_async_client_rolls_back_redelivers_and_refuses_orphans(coordinator, admin, tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, c = Holder(coordinator, tmp_path, "a"), Holder(coordinator, tmp_path, "c")
    c.client.checkpoint()

    async def main() -> tuple[int, list[str], int, int]:
        b = Holder(coordinator, tmp_path, "b", aio=True, keepalive_interval=0.2)
        redelivered = asyncio.Event()

        async def on_redeliver(payload: bytes, sender: str) -> None:  # callbacks may be coroutines
            b._redelivered(payload, sender)
            redelivered.set()

        b.client.core.on_redeliver = on_redeliver
        async with b.client as client:
            await client.register()
            await client.checkpoint()
            for envelope in (a.send("b", 2), c.send("b", 3)):
                async with client.atomic():
                    b.tokens += int(await client.unwrap(envelope))
            undone = c.send("b", 1)  # in flight when c crashes
            await asyncio.to_thread(c.restart, coordinator, tmp_path)  # the watcher task rolls b back
            await asyncio.wait_for(redelivered.wait(), 10)
            async with client.atomic():
                refused = await client.unwrap(undone)
                assert refused is None
                return b.tokens, [m.split(".")[0] for m, _ in client.redelivered], client.orphans, len(client.rollbacks)

    tokens, redelivered_from, orphans, rollbacks = asyncio.run(main())
    assert (tokens, redelivered_from, orphans, rollbacks) == (12, ["a"], 1, 1)


def test_deliveries_no_rollback_can_reach_are_forgotten(coordinator, admin, tmp_path) -> None:
    make_group(admin, pb.CIC_BCS)
    a, b = Holder(coordinator, tmp_path, "a"), Holder(coordinator, tmp_path, "b")
    for _ in range(4):
        assert b.receive(a.send("b", 1))
        a.client.checkpoint()
        b.client.checkpoint()
    log = b.client.core.deliveries
    assert [e.after_checkpoint for e in log.since(0)] == [0, 1, 2, 3]
    admin.call("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id="gc", group="g"))
    floor = b.client.keepalive().rollback_floor
    assert floor >= 2 and [e.after_checkpoint for e in log.since(0)] == list(range(floor, 4))
    assert [e.after_checkpoint for e in DeliveryLog(log.path).since(0)] == list(range(floor, 4))  # on disk too


def test_an_order_issued_before_the_agent_registered_again_does_not_undo_what_it_did_since(
        coordinator, admin, tmp_path: Path) -> None:
    """a's lease runs out, its recovery orders it back to checkpoint 1; a new process
    registers a (a newer generation), resumes from 1 and sends before it looks at its
    orders. The old order is carried out already: obeying it acknowledges it and keeps
    what a did since (its sends are of the newer generation, which the order does not
    undo); resetting a would make it forget a send b holds and reuse its key."""
    admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg-g", spec=pb.GroupSpec(
        group="g", mode=pb.UNCOORDINATED, lease_ttl_s=1, checkpoint_interval_s=3600)))
    b = AgentClient("g", "b", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(),
                    snapshot=dict, background=True)
    OPEN.append(b)
    b.register()
    old = AgentClient("g", "a", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(),
                      snapshot=lambda: {"n": 1}, background=False)
    OPEN.append(old)
    old.register()
    old.checkpoint()  # checkpoint 1
    wait_for(lambda: next(x for x in admin.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).agents
                          if x.agent_id == "a").state == pb.AGENT_FAILED, "a's lease to run out", timeout=30)

    new = AgentClient("g", "a", [coordinator.address], tmp_path / "blobs", tls=coordinator.client_tls(),
                      snapshot=lambda: {"n": 2}, background=False)
    OPEN.append(new)
    new.register()
    assert new.restore().index == 1
    first = new.wrap(b"after the restart", to="b")
    assert b.unwrap(first) == b"after the restart"
    orders = wait_for(lambda: new.pending_orders(), "a's old rollback order", timeout=30)
    assert [o.WhichOneof("kind") for o in orders] == ["roll_back"] and orders[0].roll_back.checkpoint_index == 1
    assert orders[0].roll_back.generation < new.core.generation, "the order should predate a's registration"
    undone = new.obey(orders[0])
    second = new.wrap(b"and then", to="b")
    assert (undone, b.unwrap(second)) == (None, b"and then"), (
        f"obeying the old order restored {undone} and b took a's next send for a duplicate of {first!r}")
