"""The sans-I/O protocol core, driven by a scripted coordinator: no network, no threads.

Each test checks a decision and the order of the effects it asks for (the dependency
report before the log append before the payload; restore, on_rollback, ack, then
re-delivery), which is what makes the shells correct whatever I/O they use.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

from agent_client.blobstore import LocalBlobStore
from agent_client.connection import Rejected
from agent_client.delivery_log import DeliveryLog
from agent_client.envelope import Envelope
from agent_client.effects import Blocking, Callback, Effect, Rpc, Watch, drive
from agent_client.protocol import AgentProtocol
from coordinator.api.v1 import coordinator_pb2 as pb


class Coordinator:
    """Answers the effects of one or more protocol instances and records them."""

    def __init__(self, mode: int = pb.CIC_BCS) -> None:
        self.mode = mode
        self.generation: dict[str, int] = {}
        self.reports: list[pb.DependencyRecord] = []
        # A refusal of one record, as (reason code, text), or None to accept it.
        self.refuse: Callable[[pb.DependencyRecord], tuple[int, str] | None] = lambda rec: None
        self.checkpoints: dict[str, list[pb.CheckpointMeta]] = {}
        self.orders: dict[str, list[pb.Order]] = {}
        self.acks: list[int] = []
        self.trace: list[str] = []
        self.stable_epoch = 0  # what commits answer (coordinated mode)

    def perform(self, agent: str, effect: Effect) -> Any:
        if isinstance(effect, (Blocking, Callback)):
            self.trace.append(f"{agent}:{getattr(effect.fn, 'func', effect.fn).__name__}")
            return effect.fn()
        if isinstance(effect, Watch):
            self.trace.append(f"{agent}:Watch")
            return [o for o in self.orders.get(agent, []) if o.order_id not in self.acks]
        assert isinstance(effect, Rpc)
        self.trace.append(f"{agent}:{effect.method}")
        req = effect.request
        if effect.method == "Register":
            self.generation[agent] = self.generation.get(agent, 0) + 1
            return pb.RegisterResponse(incarnation=1, generation=self.generation[agent], mode=self.mode)
        if effect.method == "ReportDependencies":
            for i, rec in enumerate(req.records):
                refusal = self.refuse(rec)
                if refusal:
                    reason_code, why = refusal
                    raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, f"records[{i}]: {why}", reason_code)
            self.reports.extend(req.records)
            return pb.ReportDependenciesResponse(accepted=len(req.records))
        if effect.method == "CommitCheckpoint":
            self.checkpoints.setdefault(agent, []).append(req.checkpoint)
            return pb.CommitCheckpointResponse(checkpoint=req.checkpoint, stable_epoch=self.stable_epoch)
        if effect.method == "ListCheckpoints":
            return pb.ListCheckpointsResponse(checkpoints=self.checkpoints.get(agent, []))
        if effect.method == "AckOrder":
            self.acks.append(req.order_id)
            return pb.AckOrderResponse()
        raise AssertionError(effect.method)

    def rollback(self, agent: str, order_id: int, index: int, line: dict[str, tuple[int, int]]) -> pb.Order:
        """A rollback order for `agent` with the recovery line agent -> (checkpoint, generation)."""
        generation = line[agent][1]
        order = pb.Order(order_id=order_id, agent_id=agent, roll_back=pb.RollBack(
            checkpoint_index=index, recovery_id=1, generation=generation,
            line=[pb.RollbackTarget(agent_id=a, checkpoint_index=i, generation=g) for a, (i, g) in line.items()]))
        self.orders.setdefault(agent, []).append(order)
        return order


class Agent:
    """A protocol instance with a token count as its state."""

    def __init__(self, coordinator: Coordinator, tmp: Path, name: str, **kw: Any) -> None:
        self.coordinator, self.name = coordinator, name
        self.tokens = 10
        self.redelivered: list[tuple[bytes, str]] = []
        self.core = AgentProtocol("g", name, blobs=LocalBlobStore(tmp / "blobs"),
                                  deliveries=DeliveryLog(tmp / name / "deliveries.jsonl"),
                                  snapshot=lambda: {"tokens": self.tokens}, on_rollback=self.rolled_back,
                                  on_redeliver=self.redeliver, **kw)
        self.run(self.core.register())

    def run(self, op: Any) -> Any:
        return drive(op, lambda effect: self.coordinator.perform(self.name, effect))

    def rolled_back(self, state: Any, reason: str) -> None:
        self.tokens = state["tokens"] if state else 10

    def redeliver(self, payload: bytes, sender: str) -> None:
        self.redelivered.append((payload, sender))
        self.tokens += int(payload)

    def send(self, to: "Agent", amount: int) -> bytes:
        self.tokens -= amount
        return self.core.wrap(str(amount).encode(), to.name)

    def receive(self, envelope: bytes) -> bool:
        payload = self.run(self.core.unwrap(envelope))
        if payload is not None:
            self.tokens += int(payload)
        return payload is not None


@pytest.fixture
def coordinator() -> Coordinator:
    return Coordinator()


def test_the_dependency_is_reported_and_logged_before_the_payload_is_handed_over(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    envelope = a.send(b, 3)
    env = Envelope.decode(envelope)
    assert (env.generation, env.seq, env.send_interval, env.receiver) == (1, 1, 1, "b")
    coordinator.trace.clear()
    assert b.receive(envelope) and b.tokens == 13
    assert coordinator.trace == ["b:ReportDependencies", "b:append"]
    [record] = coordinator.reports
    assert (record.sender, record.send_generation, record.send_interval, record.receive_interval) == ("a", 1, 1, 1)
    assert not b.receive(envelope) and b.core.duplicates == 1 and len(coordinator.reports) == 1


def test_an_orphan_is_refused_before_delivery_and_leaves_no_trace(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    envelope = a.send(b, 3)
    coordinator.refuse = lambda rec: (pb.REASON_ORPHAN_MESSAGE, "undone") if rec.sender == "a" else None
    coordinator.trace.clear()
    assert not b.receive(envelope)
    assert b.tokens == 10 and b.core.orphans == 1 and b.core.duplicates == 0
    assert coordinator.trace == ["b:ReportDependencies"]  # neither logged nor delivered
    assert len(b.core.deliveries) == 0 and envelope and not coordinator.reports
    coordinator.refuse = lambda rec: None
    assert b.receive(envelope)  # not remembered as delivered: judged again on arrival


def test_other_refusals_propagate_and_are_not_taken_for_orphans(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    # The text mentions orphans, the code does not: the code decides.
    coordinator.refuse = lambda rec: (pb.REASON_STALE_INCARNATION, "stale incarnation 1, not an orphan message")
    with pytest.raises(Rejected, match="stale incarnation"):
        b.receive(a.send(b, 1))
    assert b.core.orphans == 0 and b.tokens == 10


def test_with_batched_reports_a_late_refusal_is_counted_as_a_delivered_orphan(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b", dependency_batch=3)
    envelopes = [a.send(b, 1) for _ in range(3)]
    undone = Envelope.decode(envelopes[1]).message_id
    coordinator.refuse = lambda rec: (pb.REASON_ORPHAN_MESSAGE, "undone") if rec.message_id == undone else None
    assert all(b.receive(e) for e in envelopes[:2])  # the window: delivered before the report
    coordinator.trace.clear()
    assert b.receive(envelopes[2])  # the third fills the batch; the refusal names the second
    assert b.core.orphans_delivered == 1 and b.core.orphans == 0
    assert sorted(r.message_id for r in coordinator.reports) == sorted(
        Envelope.decode(e).message_id for e in envelopes if Envelope.decode(e).message_id != undone)
    assert coordinator.trace.count("b:ReportDependencies") == 4  # the batch, then one at a time


def test_rollback_restores_acks_then_redelivers_what_the_line_kept(coordinator, tmp_path) -> None:
    a, b, c = (Agent(coordinator, tmp_path, n) for n in "abc")
    b.run(b.core.checkpoint())  # b's checkpoint 1: 10 tokens
    from_a = a.send(b, 2)  # a keeps running: this send stands
    from_c = c.send(b, 3)  # c rolls back past this send: it is undone
    assert b.receive(from_a) and b.receive(from_c) and b.tokens == 15
    line = {"b": (1, 2), "c": (0, 2)}  # b -> 1 and c -> 0, both at generation 2
    order = coordinator.rollback("b", 7, 1, line)
    coordinator.trace.clear()
    restored = b.run(b.core.obey(order))
    assert restored.index == 1 and b.core.generation == 2
    assert coordinator.trace[:5] == ["b:ListCheckpoints", "b:load_verified", "b:rolled_back", "b:AckOrder", "b:since"]
    assert b.redelivered == [(b"2", "a")] and b.tokens == 12  # a's message again; c's is gone with c's send
    assert [m for m, _ in b.core.redelivered] == [Envelope.decode(from_a).message_id]
    assert [e.envelope.sender for e in b.core.deliveries.since(0)] == ["a"]  # logged anew, old records dropped
    assert not b.receive(from_a)  # the network's copy is now a duplicate
    assert b.run(b.core.obey(order)) is None and coordinator.acks == [7]  # an order is carried out once


def test_a_restore_to_an_older_stable_epoch_redelivers_what_crossed_its_cut(tmp_path) -> None:
    coordinator = Coordinator(pb.COORDINATED)
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    crossing = a.send(b, 4)  # sent before a's cut for epoch 1 ...
    a.run(a.core.checkpoint_now(1))
    b.run(b.core.checkpoint_now(1))
    coordinator.stable_epoch = 1
    assert b.receive(crossing) and b.tokens == 14  # ... delivered after b's: in transit across epoch 1's cut
    for epoch in (2, 3):  # later epochs become stable, as a group runs on past its savepoint
        coordinator.stable_epoch = epoch
        a.run(a.core.checkpoint_now(epoch))
        b.run(b.core.checkpoint_now(epoch))
    assert b.core.stable_epoch == 3
    order = coordinator.rollback("b", 9, 1, {"a": (1, 2), "b": (1, 2)})  # the whole group back to epoch 1
    b.run(b.core.obey(order))
    assert b.redelivered == [(b"4", "a")] and b.tokens == 14, (b.redelivered, b.tokens)


def test_duplicate_detection_is_exact_across_a_restore(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    early = [a.send(b, 1) for _ in range(50)]
    for e in early:
        assert b.receive(e)
    b.run(b.core.checkpoint())
    late = a.send(b, 1)
    assert b.receive(late)
    restarted = Agent(coordinator, tmp_path, "b")  # a new incarnation from the same checkpoint
    restarted.run(restarted.core.restore(coordinator.checkpoints["b"][-1]))
    assert not any(restarted.receive(e) for e in early)  # all 50 remembered, as one range
    assert restarted.receive(late)  # delivered after the checkpoint: forgotten with it
    assert restarted.core._delivered.ranges() == 1


def test_a_delivery_refused_because_a_rollback_is_owed_obeys_it_first(coordinator, tmp_path) -> None:
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    b.run(b.core.checkpoint())
    order = coordinator.rollback("b", 3, 1, {"b": (1, 2)})
    pending = iter([(pb.REASON_ORDER_PENDING, f"rollback order {order.order_id} owed")])
    coordinator.refuse = lambda rec: next(pending, None)
    assert b.receive(a.send(b, 4))
    assert coordinator.acks == [3] and b.core.generation == 2 and b.tokens == 14
    assert [r.receive_interval for r in coordinator.reports] == [2]  # delivered after the rollback


def test_a_rollback_ordered_during_the_redelivery_of_another_replaces_it(coordinator, tmp_path) -> None:
    """A second rollback owed while the first re-delivers: the re-delivery is refused,
    the agent obeys the second, which re-delivers from the log in its place (it used
    to finish the first's backlog first, refused again for the same order, without end)."""
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    b.run(b.core.checkpoint())
    assert b.receive(a.send(b, 2)) and b.tokens == 12
    first = coordinator.rollback("b", 7, 1, {"b": (1, 2)})
    owed: dict[str, pb.Order] = {}

    def second_ordered(order: pb.Order) -> None:
        if order.order_id == 7:
            owed["second"] = coordinator.rollback("b", 8, 1, {"b": (1, 3)})

    b.core.before_ack = second_ordered
    coordinator.refuse = lambda rec: ((pb.REASON_ORDER_PENDING, "rollback order 8 owed")
                                      if "second" in owed and 8 not in coordinator.acks else None)
    b.run(b.core.obey(first))
    assert coordinator.acks == [7, 8] and b.core.generation == 3, (coordinator.acks, coordinator.trace[-6:])
    assert b.redelivered == [(b"2", "a")] and b.tokens == 12, (b.redelivered, b.tokens)
    assert [e.envelope.sender for e in b.core.deliveries.since(0)] == ["a"]  # logged once, anew
    assert b.core._backlog is None
