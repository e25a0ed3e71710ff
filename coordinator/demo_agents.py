"""Token-passing agents for `raftpoint demo`, talking to a real cluster over gRPC.

Each agent holds tokens; a message moves tokens from sender to receiver. The
total is invariant, so after a crash and recovery it checks the recovery line:
an orphan would count tokens twice, a lost in-transit message would drop them.
Blobs go to a content-addressed directory; only metadata goes to the coordinator.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from agent_client.blobstore import BlobError, LocalBlobStore
from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import cic


@dataclass
class Message:
    message_id: str
    sender: str
    send_interval: int
    receiver: str
    amount: int
    piggyback: bytes
    epoch: int
    receive_interval: int = 0  # set on delivery


@dataclass
class DemoAgent:
    agent_id: str
    tokens: int
    incarnation: int = 0
    last_index: int = 0
    bcs: cic.BcsState = field(default_factory=cic.BcsState)
    epoch: int = 0
    sent: int = 0
    pending_deps: list[pb.DependencyRecord] = field(default_factory=list)

    @property
    def interval(self) -> int:
        return self.last_index + 1

    def state_bytes(self) -> bytes:
        return json.dumps({"tokens": self.tokens, "lc": self.bcs.lc, "sent": self.sent}, sort_keys=True).encode()

    def load(self, data: bytes, index: int) -> None:
        doc = json.loads(data)
        self.tokens, self.bcs.lc, self.sent, self.last_index = doc["tokens"], doc["lc"], doc["sent"], index


class World:
    def __init__(self, conn: Connection, group: str, mode: int, agents: list[str], tokens: int,
                 blob_dir: Path, rng: random.Random) -> None:
        self.conn, self.group, self.mode, self.rng = conn, group, mode, rng
        self.agents = {a: DemoAgent(a, tokens) for a in agents}
        self.total = tokens * len(agents)
        self.blobs = LocalBlobStore(blob_dir)
        self.in_flight: list[Message] = []
        self.delivered: list[Message] = []
        self.forced = 0
        self.basic = 0
        self._rid = 0

    def rid(self, what: str) -> str:
        self._rid += 1
        return f"{self.group}-{what}-{self._rid}"

    # ---- coordinator calls --------------------------------------------------------
    def token(self, agent: DemoAgent) -> pb.FencingToken:
        return pb.FencingToken(incarnation=agent.incarnation, epoch=agent.epoch)

    def register(self, agent: DemoAgent) -> pb.RegisterResponse:
        resp = self.conn.call("AgentService", "Register",
                              pb.RegisterRequest(request_id=self.rid("reg"), group=self.group, agent_id=agent.agent_id))
        agent.incarnation, agent.epoch = resp.incarnation, resp.current_epoch
        return resp

    def checkpoint(self, agent: DemoAgent, *, index: int | None = None, kind: int = pb.BASIC) -> int:
        index = agent.last_index + 1 if index is None else index
        if self.mode != pb.COORDINATED:
            index = cic.bcs_on_checkpoint(agent.bcs, index if kind == pb.FORCED else None)
            index = max(index, agent.last_index + 1)
            agent.bcs.lc = index
        self.flush_dependencies(agent)
        blob = self.blobs.put(agent.state_bytes())  # the blob first: a crash here leaves garbage, not a gap
        self.conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id=self.rid("cp"), token=self.token(agent),
            checkpoint=pb.CheckpointMeta(group=self.group, agent_id=agent.agent_id, index=index, epoch=agent.epoch,
                                         kind=kind, blob_uri=blob.uri, sha256=blob.sha256, size=blob.size)))
        agent.last_index = index
        return index

    def flush_dependencies(self, agent: DemoAgent) -> None:
        if agent.pending_deps:
            self.conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
                request_id=self.rid("deps"), group=self.group, agent_id=agent.agent_id, token=self.token(agent),
                records=agent.pending_deps))
            agent.pending_deps = []

    # ---- messaging ----------------------------------------------------------------
    def send(self, sender: DemoAgent, receiver: DemoAgent) -> None:
        amount = self.rng.randint(1, max(1, sender.tokens // 3)) if sender.tokens else 0
        if not amount:
            return
        sender.tokens -= amount
        sender.sent += 1
        self.in_flight.append(Message(f"{sender.agent_id}.{sender.incarnation}.{sender.sent}", sender.agent_id,
                                      sender.interval, receiver.agent_id, amount, cic.bcs_on_send(sender.bcs),
                                      sender.epoch))

    def deliver(self, m: Message) -> None:
        receiver = self.agents[m.receiver]
        if self.mode != pb.COORDINATED:
            forced = cic.bcs_forced_index(receiver.bcs, m.piggyback)
            if forced is not None:
                self.checkpoint(receiver, index=max(forced, receiver.last_index + 1), kind=pb.FORCED)
                self.forced += 1
        receiver.tokens += m.amount
        m.receive_interval = receiver.interval
        receiver.pending_deps.append(pb.DependencyRecord(sender=m.sender, send_interval=m.send_interval,
                                                         receiver=m.receiver, receive_interval=m.receive_interval,
                                                         message_id=m.message_id))
        self.delivered.append(m)

    def step(self, basic_probability: float = 0.1) -> None:
        """One round: some sends, some deliveries (out of order), some basic checkpoints."""
        ids = sorted(self.agents)
        for a in ids:
            if self.rng.random() < 0.6:
                self.send(self.agents[a], self.agents[self.rng.choice([b for b in ids if b != a])])
        self.rng.shuffle(self.in_flight)
        for _ in range(len(self.in_flight) // 2 + 1):
            if self.in_flight:
                self.deliver(self.in_flight.pop())
        if self.mode != pb.COORDINATED:
            for a in ids:
                if self.rng.random() < basic_probability:
                    self.checkpoint(self.agents[a])
                    self.basic += 1

    def drain(self) -> None:
        while self.in_flight:
            self.deliver(self.in_flight.pop())

    def tokens_accounted(self) -> int:
        return sum(a.tokens for a in self.agents.values()) + sum(m.amount for m in self.in_flight)

    # ---- recovery -----------------------------------------------------------------
    def crash_and_recover(self, victim: str, orders_of) -> dict[str, int]:
        """Lose `victim`'s volatile state, restart it, obey the rollback orders.

        Returns the recovery line (agent -> checkpoint index) of the agents that rolled back.
        """
        agent = self.agents[victim]
        agent.pending_deps = []  # unreported receives die with the process
        resp = self.register(agent)  # a restart: the coordinator computes the recovery line
        targets: dict[str, int] = {}
        for a in sorted(self.agents):
            for order in orders_of(self.agents[a]):
                if order.WhichOneof("kind") == "roll_back":
                    targets[a] = order.roll_back.checkpoint_index
                    self.restore(self.agents[a], order.roll_back.checkpoint_index)
                    self.conn.call("AgentService", "AckOrder", pb.AckOrderRequest(
                        request_id=self.rid("ack"), group=self.group, agent_id=a, token=self.token(self.agents[a]),
                        order_id=order.order_id))
        assert victim in targets, f"no rollback order for the restarted agent (resume_from {resp.resume_from.index})"
        self._fix_channels(targets)
        return targets

    def restore(self, agent: DemoAgent, index: int) -> None:
        if index == 0:
            agent.load(json.dumps({"tokens": self.total // len(self.agents), "lc": 0, "sent": agent.sent}).encode(), 0)
            return
        [meta] = [c for c in self.conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
            group=self.group, agent_id=agent.agent_id)).checkpoints if c.index == index]
        try:
            data = self.blobs.get(meta.blob_uri)
        except BlobError as exc:
            raise RuntimeError(f"checkpoint {index} of {agent.agent_id} rejected: {exc}") from None
        if hashlib.sha256(data).hexdigest() != meta.sha256:
            raise RuntimeError(f"checkpoint {index} of {agent.agent_id} rejected: digest differs from its metadata")
        sent = agent.sent
        agent.load(data, index)
        agent.sent = sent  # message ids stay unique across rollbacks
        agent.pending_deps = []

    def _fix_channels(self, line: dict[str, int]) -> None:
        """Undo what the line forgets: sends after the sender's checkpoint vanish,
        receives after the receiver's checkpoint are re-delivered (the in-transit
        messages a channel log would replay)."""
        def forgotten_send(m: Message) -> bool:
            return m.sender in line and m.send_interval > line[m.sender]

        def forgotten_receive(m: Message) -> bool:
            return m.receiver in line and m.receive_interval > line[m.receiver]

        orphans = [m for m in self.delivered if forgotten_send(m) and not forgotten_receive(m)]
        if orphans:
            raise RuntimeError(f"inconsistent recovery line: orphan messages {[m.message_id for m in orphans]}")
        replay = [m for m in self.delivered if forgotten_receive(m) and not forgotten_send(m)]
        self.delivered = [m for m in self.delivered if not forgotten_receive(m)]
        self.in_flight = [m for m in self.in_flight if not forgotten_send(m)] + replay
