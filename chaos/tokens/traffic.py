"""Driving one group of token-passing agent processes: the network between them.

Shared by `raftpoint demo` and the chaos agent workload. The driver plays the
network: it asks agents to send (a message moves tokens from sender to receiver),
holds what is in flight, delivers it out of order, sometimes late and sometimes
twice, and writes everything it sees -- and what the agents' journals add: recovery
lines, re-deliveries, acknowledged checkpoints -- into a ledger.Ledger, whose
verdict says whether the agents stayed consistent. Callers decide when to crash,
recover and audit.

Every request to an agent goes through `call(agent, f, value, thunk)`: the demo runs
the thunk, the chaos workload also records the operation in its history. A request
that fails leaves the network as it was (the message stays in flight, to be tried
again later); a receiver that died mid-delivery leaves the outcome unknown.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping

from chaos.tokens.ledger import Ledger, Message, Tally, fences_of
from chaos.tokens.process import AgentDied, AgentProcess
from coordinator.api.v1 import coordinator_pb2 as pb

MODES = {"coordinated": pb.COORDINATED, "bcs": pb.CIC_BCS, "hmnr": pb.CIC_HMNR, "fdas": pb.CIC_FDAS}
RECENT = 256  # duplicates are copies of one of the last this many delivered messages

Thunk = Callable[[], dict[str, Any]]
Call = Callable[[str, str, dict[str, Any], Thunk], dict[str, Any]]


def savepoint_cut(savepoint: pb.Savepoint) -> dict[str, int]:
    """A savepoint's checkpoint index per agent (0: its initial state), as the ledger takes a restore's."""
    return {s.agent_id: s.index for s in savepoint.checkpoints}


def direct(agent: str, f: str, value: dict[str, Any], thunk: Thunk) -> dict[str, Any]:
    return thunk()


@dataclass(frozen=True)
class Traffic:
    send_probability: float = 0.6  # per agent and round
    duplicate_probability: float = 0.3  # per round: a copy of a delivered message goes back in flight
    checkpoint_probability: float = 0.1  # CIC: a basic checkpoint per agent and round
    hold_probability: float = 0.0  # a message or copy is held in flight ...
    hold_s: tuple[float, float] = (0.2, 1.0)  # ... for this long before it may be delivered
    epoch_every: int = 4  # coordinated: rounds between epochs


@dataclass
class InFlight:
    message: Message
    due: float  # not delivered before this time
    copy: bool = False  # a duplicate: carries no tokens


class Network:
    """What is in flight, in no particular order."""

    def __init__(self, rng: random.Random, traffic: Traffic) -> None:
        self.rng, self.traffic = rng, traffic
        self.entries: list[InFlight] = []

    def put(self, m: Message, now: float, *, copy: bool = False) -> InFlight:
        hold = self.rng.uniform(*self.traffic.hold_s) if self.rng.random() < self.traffic.hold_probability else 0.0
        entry = InFlight(m, now + hold, copy)
        self.entries.append(entry)
        return entry

    def take(self, now: float, receivers: Collection[str], everything: bool = False) -> list[InFlight]:
        """Some of what is due for these receivers (all of it with `everything`), in random
        order; taken out of the network."""
        due = [e for e in self.entries if e.message.receiver in receivers and (everything or e.due <= now)]
        self.rng.shuffle(due)
        chosen = due if everything else due[:len(due) // 2 + 1]
        taken = {id(e) for e in chosen}
        self.entries = [e for e in self.entries if id(e) not in taken]
        return chosen

    def carrying(self) -> list[str]:
        """The messages whose tokens are in the network (copies carry none)."""
        return [e.message.id for e in self.entries if not e.copy]

    def demote(self, message_id: str) -> None:
        """Its receiver re-delivered the message from its own log: what the network still
        holds of it is a copy (a delivery that died with its receiver may have logged it)."""
        for e in self.entries:
            if e.message.id == message_id:
                e.copy = True

    def __len__(self) -> int:
        return len(self.entries)


class TokenGroup:
    """The agent processes of one group, the network between them, and its ledger.

    `tolerant`: a failed request is left for later instead of raised (the chaos
    workload, where the coordinator may be unreachable; the demo raises)."""

    def __init__(self, name: str, mode: int, procs: Mapping[str, AgentProcess], tokens_each: int,
                 rng: random.Random, traffic: Traffic = Traffic(), *, call: Call = direct,
                 tolerant: bool = False, on_event: Callable[[str, Mapping[str, Any]], None] | None = None) -> None:
        """`on_event(agent, record)` sees every journal record as it is read."""
        self.name, self.mode, self.rng, self.traffic = name, mode, rng, traffic
        self.procs = dict(procs)
        self.ids = list(self.procs)
        self.ledger = Ledger(self.ids, tokens_each)
        self.network = Network(rng, traffic)
        self.call, self.tolerant, self.on_event = call, tolerant, on_event
        self.stats: Counter[str] = Counter()
        self._recent: list[Message] = []

    @property
    def coordinated(self) -> bool:
        return self.mode == pb.COORDINATED

    def request(self, agent: str, f: str, value: dict[str, Any], op: str, **fields: Any) -> dict[str, Any]:
        return self.call(agent, f, {"group": self.name, **value},
                         lambda: self.procs[agent].request(op, **fields))

    # ---- traffic ------------------------------------------------------------------------
    def send(self, a: str, b: str, now: float) -> Message | None:
        reply = self.request(a, "send", {"from": a, "to": b}, "send", to=b)
        if not reply["envelope"]:
            return None  # no tokens left to send
        m = self.ledger.sent(id=reply["id"], sender=a, receiver=b, amount=reply["amount"],
                             interval=reply["interval"], generation=reply["generation"], envelope=reply["envelope"])
        self.network.put(m, now)
        self.stats["sent"] += 1
        return m

    def deliver(self, entry: InFlight, *, bypass: bool = False) -> dict[str, Any]:
        """Hand the envelope to its receiver and record what it made of it. `bypass` is a
        planted fault: the payload is applied without unwrap() and its checks."""
        m = entry.message
        value = {"id": m.id, "to": m.receiver, "copy": entry.copy, **({"bypass": True} if bypass else {})}
        try:
            reply = self.request(m.receiver, "deliver", value, "apply" if bypass else "deliver", envelope=m.envelope)
        except AgentDied:
            self.ledger.unknown(m.id)
            self.network.entries.append(entry)
            raise
        except RuntimeError:  # refused for another reason (e.g. no leader in time): not delivered, try later
            self.network.entries.append(entry)
            raise
        if reply["delivered"]:
            self.ledger.accepted(m.id, m.receiver, reply["interval"], reply["generation"])
            self.stats["delivered"] += 1
            self.stats["forced"] += reply.get("forced", 0)
            self._recent = (self._recent + [m])[-RECENT:]
        else:
            self.ledger.refused(m.id, orphan=reply["orphan"], generation=reply["generation"])
            self.stats["orphans_refused" if reply["orphan"] else "duplicates_dropped"] += 1
        return reply

    def duplicate(self, now: float) -> None:
        """A copy of a delivered message back in flight, as a network that retransmits."""
        if self._recent:
            self.network.put(self.rng.choice(self._recent), now, copy=True)
            self.stats["duplicates_sent"] += 1

    def checkpoint(self, a: str) -> dict[str, Any]:
        reply = self.request(a, "checkpoint", {"agent": a}, "checkpoint")
        self.stats["basic"] += 1
        return reply

    def step(self, round_: int, now: float, alive: Collection[str] | None = None,
             start_epoch: Callable[[int], None] | None = None) -> None:
        """One round among the `alive` agents (default all): sends, a duplicate maybe,
        deliveries of what is due, then an epoch (coordinated) or basic checkpoints."""
        alive = self.ids if alive is None else [a for a in self.ids if a in alive]
        for a in alive:
            if self.rng.random() < self.traffic.send_probability:
                self._guard(self.send, a, self.rng.choice([b for b in self.ids if b != a]), now)
        if self.rng.random() < self.traffic.duplicate_probability:
            self.duplicate(now)
        for entry in self.network.take(now, alive):
            self._guard(self.deliver, entry)
        if self.coordinated:
            if start_epoch is not None and round_ % self.traffic.epoch_every == 0:
                self._guard(start_epoch, round_)
        else:
            for a in alive:
                if self.rng.random() < self.traffic.checkpoint_probability:
                    self._guard(self.checkpoint, a)

    def drain(self, now: float, alive: Collection[str] | None = None, rounds: int = 10) -> None:
        """Deliver everything in flight to these receivers, held or not (bounded: a
        delivery that fails stays in flight for the next round)."""
        for _ in range(rounds):
            taken = self.network.take(now, self.ids if alive is None else alive, everything=True)
            if not taken:
                return
            for entry in taken:
                self._guard(self.deliver, entry)

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self.tolerant:
            return fn(*args)
        try:
            return fn(*args)
        except (AgentDied, RuntimeError):  # recorded by `call`; the network kept what it needs
            return None

    # ---- what the agents report ------------------------------------------------------------
    def ingest(self, agents: Iterable[str] | None = None) -> list[int]:
        """Read the agents' journals into the ledger; returns the recovery ids first seen."""
        new = []
        for a in self.ids if agents is None else agents:
            for ev in self.procs[a].events():
                new += self._ingest(a, ev)
                if self.on_event is not None:
                    self.on_event(a, ev)
        return sorted(new)

    def _ingest(self, agent: str, ev: Mapping[str, Any]) -> list[int]:
        kind = ev.get("ev")
        if kind == "line":
            if "tokens" in ev:
                self.ledger.rolled_back(agent, ev["recovery_id"], ev["index"], ev["tokens"])
            return [ev["recovery_id"]] if self.ledger.line(ev["recovery_id"], fences_of(ev["line"])) else []
        if kind == "redelivered":
            self.ledger.accepted(ev["id"], agent, ev["interval"], ev["generation"], redelivered=True)
            self.network.demote(ev["id"])
            self.stats["redelivered"] += 1
        elif kind == "commit":
            self.ledger.committed(agent, ev["index"], ev["uri"], ev["sha256"], ev["generation"])
            self.stats["commits"] += 1
        return []

    def statuses(self, agents: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        return {a: self.procs[a].request("status") for a in (self.ids if agents is None else agents)}

    def audit(self, label: str, statuses: Mapping[str, Mapping[str, Any]] | None = None,
              network: Iterable[str] | None = None) -> Tally:
        """Tokens in the agents plus in the network, against the total. Call it with no
        request in flight and every agent up; read the journals first. `network`: what
        to count as in transit, if not what the network holds (a planted fault)."""
        st = self.statuses() if statuses is None else statuses
        return self.ledger.audit(label, {a: s["tokens"] for a, s in st.items()},
                                 {a: s["generation"] for a, s in st.items()},
                                 self.network.carrying() if network is None else network)

    def recent(self) -> list[Message]:
        """The last messages delivered (what duplicates are copies of)."""
        return list(self._recent)
