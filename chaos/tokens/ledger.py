"""The ground truth of a token-passing run: every message, delivery and recovery line.

The driver of `raftpoint demo` and of the chaos agent workload plays the network, so
it sees every send and every delivery attempt; the agents' journals add the recovery
lines of the rollback orders they carried out and the messages they re-delivered.
From that record alone this module decides, after the fact, what each line had to
undo and whether the agents did it. Pure: no I/O, no clock.

Time is the agents' generations, as in coordinator.core.fences: an agent's
generation rises with each registration and each rollback, and a line's fence
(generation G, checkpoint k) of agent p undoes what p did in an interval after k
while in a generation below G. A send, a delivery and a checkpoint are all placed
that way, so no judgement depends on the order in which the driver learns things (a
line may reach it after deliveries it undid), which a concurrent run needs.

The judgements (`Ledger.verdict`):
- orphans: a delivery whose send a line undid must be undone by that line or an
  earlier one (otherwise the receiver keeps a message its sender never sent), and a
  message from a replaced (zombie) incarnation is never delivered;
- duplicates: no two deliveries of one message are live in the same generation of
  their receiver;
- lost messages: a delivery a line undid while keeping its send is re-delivered by its
  receiver, once; a refusal as a duplicate or as an orphan is justified by the record;
  at the end every message whose send stands is delivered or still in the network;
- tokens: at each audit the agents' tokens plus those of the messages the network
  holds (whose sends stand, as far as the agents' generations at the audit go) add up
  to the total;
- restores: a group restored to a savepoint is ordered back to exactly the
  savepoint's checkpoints; that cut is consistent by the record (no message received
  in it that was not sent in it) and its tokens plus those in transit across it add
  up to the total; and each agent that rolled back to it holds what the record says
  it held at its checkpoint there.
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping

from coordinator.core.fences import undoing
from coordinator.core.model import Fence

ORPHANS, DUPLICATES, LOST, TOKENS = "no-orphans", "duplicates-delivered-once", "lost-messages-redelivered", "tokens"
RESTORES = "restores-return-to-savepoint"
NEVER = float("inf")  # the generation at which a live delivery is undone
# Sees every event as (method, keyword arguments), JSON-ready, so that a history can
# carry the record and the judgement can be made again from it (Ledger.replay).
Journal = Callable[[str, dict[str, Any]], None]
EVENTS = ("sent", "accepted", "refused", "unknown", "line", "committed", "audit", "restore", "rolled_back")


@dataclass(frozen=True)
class Delivery:
    receiver: str
    interval: int
    generation: int
    redelivered: bool  # by the receiver from its own log, after a rollback
    seq: int  # order in which the ledger learned it


@dataclass(frozen=True)
class Refusal:
    orphan: bool  # else refused as a duplicate
    generation: int  # the receiver's, at the attempt
    seq: int


@dataclass
class Message:
    id: str
    sender: str
    receiver: str
    amount: int
    send_interval: int
    send_generation: int
    envelope: str
    seq: int
    deliveries: list[Delivery] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    unknown: int = 0  # attempts whose outcome was never learned (the receiver died)
    zombie: bool = False  # sent by an incarnation already replaced: it must never be delivered


@dataclass(frozen=True)
class Undone:
    """The first line (by recovery id) that undid something, and the fence that did."""

    recovery_id: int
    fence: Fence


@dataclass(frozen=True)
class Commit:
    """A checkpoint the coordinator acknowledged to its agent."""

    agent: str
    index: int
    uri: str
    sha256: str
    generation: int


@dataclass(frozen=True)
class Restore:
    """A restore the coordinator answered: its recovery and the savepoint it goes back to."""

    recovery_id: int
    savepoint: str
    cut: Mapping[str, int]  # the savepoint's checkpoint index per agent (0 or absent: its initial state)


@dataclass(frozen=True)
class RolledBack:
    """An agent's state right after it carried out a rollback order (before any re-delivery)."""

    agent: str
    recovery_id: int
    index: int
    tokens: int


@dataclass(frozen=True)
class Audit:
    label: str
    tokens: Mapping[str, int]
    generations: Mapping[str, int]  # each agent's, when its tokens were read
    network: tuple[str, ...]  # messages the network holds that carry tokens (not duplicate copies)
    seq: int


@dataclass(frozen=True)
class Finding:
    invariant: str
    why: str
    message: str | None = None


@dataclass
class Verdict:
    findings: list[Finding]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.findings

    def of(self, invariant: str) -> list[Finding]:
        return [f for f in self.findings if f.invariant == invariant]


@dataclass(frozen=True)
class Tally:
    """One audit, evaluated."""

    in_agents: int
    in_transit: int
    total: int

    @property
    def conserved(self) -> bool:
        return self.in_agents + self.in_transit == self.total


class Ledger:
    """One group's record; fed by one thread (the group's driver)."""

    def __init__(self, agents: Iterable[str], tokens_each: int, journal: Journal | None = None) -> None:
        self.journal = journal
        self.tokens_each = tokens_each
        self.agents = list(agents)
        self.total = tokens_each * len(self.agents)
        self.messages: dict[str, Message] = {}
        self.lines: dict[int, tuple[Fence, ...]] = {}
        self._fences: dict[str, list[tuple[int, Fence]]] = {a: [] for a in self.agents}
        self.audits: list[Audit] = []
        self.commits: list[Commit] = []
        self.restores: list[Restore] = []
        self.rollbacks: list[RolledBack] = []
        self.anomalies: list[Finding] = []
        self._seq = 0

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _log(self, event: str, **args: Any) -> None:
        if self.journal is not None:
            self.journal(event, args)

    @classmethod
    def replay(cls, agents: Iterable[str], tokens_each: int,
               events: Iterable[tuple[str, Mapping[str, Any]]]) -> "Ledger":
        """The ledger a journal describes: the same record, so the same verdicts."""
        book = cls(agents, tokens_each)
        for event, args in events:
            if event not in EVENTS:
                raise ValueError(f"not a ledger event: {event!r}")
            if event == "line":
                book.line(args["recovery_id"], [Fence(*f) for f in args["fences"]])
            else:
                getattr(book, event)(**args)
        return book

    # ---- what happened ---------------------------------------------------------------
    def sent(self, *, id: str, sender: str, receiver: str, amount: int, interval: int, generation: int,
             envelope: str, zombie: bool = False) -> Message:
        self._log("sent", id=id, sender=sender, receiver=receiver, amount=amount, interval=interval,
                  generation=generation, envelope=envelope, zombie=zombie)
        m = Message(id, sender, receiver, amount, interval, generation, envelope, self._next(), zombie=zombie)
        self.messages[id] = m
        return m

    def accepted(self, id: str, receiver: str, interval: int, generation: int, *,
                 redelivered: bool = False) -> Delivery | None:
        self._log("accepted", id=id, receiver=receiver, interval=interval, generation=generation,
                  redelivered=redelivered)
        m = self.messages.get(id)
        if m is None or m.receiver != receiver:
            self.anomalies.append(Finding(LOST, f"{receiver} delivered {id}, which no agent sent to it", id))
            return None
        d = Delivery(receiver, interval, generation, redelivered, self._next())
        m.deliveries.append(d)
        return d

    def refused(self, id: str, *, orphan: bool, generation: int) -> None:
        self._log("refused", id=id, orphan=orphan, generation=generation)
        self.messages[id].refusals.append(Refusal(orphan, generation, self._next()))

    def unknown(self, id: str) -> None:
        """A delivery attempt whose answer never came: its receiver died meanwhile."""
        self._log("unknown", id=id)
        self.messages[id].unknown += 1

    def line(self, recovery_id: int, fences: Iterable[Fence]) -> bool:
        """A recovery line as a rollback order carried it; True if it is new. Every agent
        it rolls back reports it: they must all report the same line."""
        fences = tuple(sorted(fences, key=lambda f: f.agent_id))
        self._log("line", recovery_id=recovery_id, fences=[[f.agent_id, f.generation, f.index] for f in fences])
        known = self.lines.get(recovery_id)
        if known is not None:
            if known != fences:
                self.anomalies.append(Finding(ORPHANS, f"recovery {recovery_id} was ordered with two lines: "
                                                       f"{_line_text(known)} and {_line_text(fences)}"))
            return False
        self.lines[recovery_id] = fences
        for f in fences:
            bisect.insort(self._fences.setdefault(f.agent_id, []), (recovery_id, f), key=lambda rf: rf[0])
        return True

    def committed(self, agent: str, index: int, uri: str, sha256: str, generation: int) -> None:
        self._log("committed", agent=agent, index=index, uri=uri, sha256=sha256, generation=generation)
        self.commits.append(Commit(agent, index, uri, sha256, generation))

    def restore(self, recovery_id: int, savepoint: str, cut: Mapping[str, int]) -> None:
        """The coordinator answered a restore to `savepoint` (whose checkpoints are `cut`) as recovery `recovery_id`."""
        self._log("restore", recovery_id=recovery_id, savepoint=savepoint, cut=dict(cut))
        self.restores.append(Restore(recovery_id, savepoint, dict(cut)))

    def rolled_back(self, agent: str, recovery_id: int, index: int, tokens: int) -> None:
        """`agent` restored its checkpoint `index` for recovery `recovery_id` and then held `tokens`."""
        self._log("rolled_back", agent=agent, recovery_id=recovery_id, index=index, tokens=tokens)
        self.rollbacks.append(RolledBack(agent, recovery_id, index, tokens))

    def audit(self, label: str, tokens: Mapping[str, int], generations: Mapping[str, int],
              network: Iterable[str]) -> Tally:
        a = Audit(label, dict(tokens), dict(generations), tuple(network), self._next())
        self._log("audit", label=label, tokens=a.tokens, generations=a.generations, network=list(a.network))
        self.audits.append(a)
        return self.tally(a)

    # ---- what it means -----------------------------------------------------------------
    def _undone(self, agent: str, generation: int, interval: int, upto: int | None = None) -> Undone | None:
        """The first line whose fence of `agent` undoes what it did in (generation,
        interval); with `upto`, only fences the agent had reached by that generation."""
        for recovery_id, f in self._fences.get(agent, ()):
            if (upto is None or f.generation <= upto) and undoing((f,), generation, interval):
                return Undone(recovery_id, f)
        return None

    def send_undone(self, m: Message, upto: int | None = None) -> Undone | None:
        return self._undone(m.sender, m.send_generation, m.send_interval, upto)

    def delivery_undone(self, d: Delivery) -> Undone | None:
        return self._undone(d.receiver, d.generation, d.interval)

    def checkpoint_undone(self, agent: str, generation: int, index: int) -> Undone | None:
        """A checkpoint committed in (generation, index) is gone once a line rolls its agent below it."""
        return self._undone(agent, generation, index)

    def standing(self, collected: Collection[str]) -> tuple[list[Commit], dict[str, int]]:
        """The acknowledged checkpoints that must still be there: not rolled below by a
        line, not handed to garbage collection (`collected`: the URIs it returned)."""
        keep, counts = [], Counter(acknowledged=len(self.commits))
        for c in self.commits:
            if self.checkpoint_undone(c.agent, c.generation, c.index) is not None:
                counts["rolled_back"] += 1
            elif c.uri in collected:
                counts["collected"] += 1
            else:
                keep.append(c)
        return keep, dict(counts)

    def holds(self, at: Fence, generation: int, interval: int) -> bool:
        """Whether what `at.agent_id` did in (generation, interval) is in its checkpoint
        `at.index` as a rollback with fence `at` restores it: done before that rollback's
        generation, in an interval up to the checkpoint, and not undone by an earlier line."""
        return (generation < at.generation and interval <= at.index
                and self._undone(at.agent_id, generation, interval, upto=at.generation - 1) is None)

    def held(self, at: Fence) -> int:
        """The tokens `at.agent_id` held at its checkpoint `at.index` restored with fence `at`, by the record."""
        tokens = self.tokens_each
        for m in self.messages.values():
            if m.zombie:
                continue
            if m.sender == at.agent_id and self.holds(at, m.send_generation, m.send_interval):
                tokens -= m.amount
            if m.receiver == at.agent_id:
                tokens += m.amount * sum(self.holds(at, d.generation, d.interval) for d in m.deliveries)
        return tokens

    def cut(self, at: Mapping[str, Fence]) -> tuple[Tally, list[Message]]:
        """The global checkpoint of one checkpoint per agent (each as restored with its fence
        in `at`): its tokens in agents and in transit across it (sent in it, not received
        in it), and its orphans (received in it, not sent in it)."""
        in_transit, orphaned = 0, []
        for m in self.messages.values():
            if m.zombie:
                continue
            sent = self.holds(at[m.sender], m.send_generation, m.send_interval)
            received = any(self.holds(at[m.receiver], d.generation, d.interval) for d in m.deliveries)
            if received and not sent:
                orphaned.append(m)
            elif sent and not received:
                in_transit += m.amount
        return Tally(sum(self.held(f) for f in at.values()), in_transit, self.total), orphaned

    def live(self, m: Message) -> list[Delivery]:
        return [d for d in m.deliveries if self.delivery_undone(d) is None]

    def in_transit(self, m: Message, generations: Mapping[str, int]) -> bool:
        """Whether `m`, seen in the network at an audit of these generations, carries
        tokens: a zombie's send never did, and a send a line undid no longer does."""
        return not m.zombie and self.send_undone(m, upto=generations.get(m.sender, 0)) is None

    def tally(self, a: Audit) -> Tally:
        in_transit = sum(self.messages[id].amount for id in a.network if self.in_transit(self.messages[id], a.generations))
        return Tally(sum(a.tokens.values()), in_transit, self.total)

    def lost_to(self, recovery_id: int) -> list[tuple[Message, Delivery]]:
        """The deliveries this line took out of their receivers' states while keeping
        their sends: the receivers must re-deliver them."""
        out = []
        for m in self.messages.values():
            send = self.send_undone(m)
            for d in m.deliveries:
                u = self.delivery_undone(d)
                if u is not None and u.recovery_id == recovery_id and (send is None or send.recovery_id > recovery_id):
                    out.append((m, d))
        return out

    def redelivered_for(self, recovery_id: int) -> list[tuple[Message, Delivery]]:
        """Re-deliveries made in answer to this line: after the receiver reached the line's
        generation and before its next rollback, of a message the line took from it."""
        fences = {f.agent_id: f for f in self.lines.get(recovery_id, ())}
        out = []
        for m in self.messages.values():
            f = fences.get(m.receiver)
            if f is None or not any((u := self.delivery_undone(d)) and u.recovery_id == recovery_id
                                    for d in m.deliveries):
                continue
            later = [g.generation for r, g in self._fences.get(m.receiver, ()) if r > recovery_id]
            out += [(m, e) for e in m.deliveries
                    if e.redelivered and f.generation <= e.generation < min(later, default=NEVER)]
        return out

    def verdict(self, *, final: bool = False, network: Collection[str] = ()) -> Verdict:
        """Every finding so far. `final`: the run is over and settled, so a message whose
        send stands must be delivered, unless it is still in `network`."""
        findings = list(self.anomalies)
        counts: Counter[str] = Counter()
        for m in self.messages.values():
            self._judge(m, findings, counts, final, network)
        for a in self.audits:
            t = self.tally(a)
            counts["audits"] += 1
            if not t.conserved:
                findings.append(Finding(TOKENS, f"tokens {a.label}: {t.in_agents} in agents + {t.in_transit} in "
                                                f"transit = {t.in_agents + t.in_transit}, not {t.total}"))
        for r in self.restores:
            self._judge_restore(r, findings, counts)
        counts["recoveries"] = len(self.lines)
        counts["messages"] = len(self.messages)
        return Verdict(findings, dict(counts))

    def _judge(self, m: Message, findings: list[Finding], counts: Counter[str], final: bool,
               network: Collection[str]) -> None:
        send = self.send_undone(m)
        undone = [self.delivery_undone(d) for d in m.deliveries]
        counts["deliveries"] += sum(not d.redelivered for d in m.deliveries)
        counts["redeliveries"] += sum(d.redelivered for d in m.deliveries)
        counts["sends_undone"] += send is not None
        where = f"{m.id} ({m.sender} -> {m.receiver}, {m.amount} tokens)"
        if m.zombie:
            counts["orphans_refused"] += sum(r.orphan for r in m.refusals)
            for d in m.deliveries:
                findings.append(Finding(ORPHANS, f"{where} was sent by a replaced incarnation of {m.sender} and "
                                                 f"delivered in generation {d.generation}", m.id))
            return
        for d, u in zip(m.deliveries, undone):
            if send is not None and (u is None or u.recovery_id > send.recovery_id):
                findings.append(Finding(ORPHANS, f"{where} delivered in generation {d.generation} interval "
                                                 f"{d.interval}, but recovery {send.recovery_id} undid its send "
                                                 + ("and kept the delivery" if u is None else
                                                    f"and only recovery {u.recovery_id} undid the delivery"), m.id))
        for i, (d, u) in enumerate(zip(m.deliveries, undone)):
            for e, v in zip(m.deliveries[i + 1:], undone[i + 1:]):
                if d.generation < (v.fence.generation if v else NEVER) and e.generation < (
                        u.fence.generation if u else NEVER):
                    kind = LOST if d.redelivered and e.redelivered else DUPLICATES
                    findings.append(Finding(kind, f"{where} delivered twice to {m.receiver}: in generations "
                                                  f"{d.generation} and {e.generation}"
                                                  + (", both re-deliveries" if kind == LOST else ""), m.id))
            if u is not None and (send is None or send.recovery_id > u.recovery_id):
                counts["lost_by_rollbacks"] += 1
                if not any(e.redelivered and e.receiver == d.receiver and e.generation >= u.fence.generation
                           for e in m.deliveries if e is not d):
                    findings.append(Finding(LOST, f"recovery {u.recovery_id} took {where} from {m.receiver} and "
                                                  f"kept its send, and {m.receiver} never re-delivered it", m.id))
        for r in m.refusals:
            if r.orphan:
                counts["orphans_refused"] += 1
                if send is None:
                    findings.append(Finding(LOST, f"{m.receiver} refused {where} as an orphan, but no recovery "
                                                  f"undid its send", m.id))
            else:
                counts["duplicates_refused"] += 1
                live_then = [d for d, u in zip(m.deliveries, undone)
                             if d.generation <= r.generation and (u is None or u.fence.generation > r.generation)]
                if not live_then:
                    findings.append(Finding(LOST, f"{m.receiver} refused {where} as a duplicate in generation "
                                                  f"{r.generation}, when it held no delivery of it", m.id))
        if final and send is None and not m.deliveries and m.id not in network:
            findings.append(Finding(LOST, f"{where} was sent (its send stands) and is delivered nowhere", m.id))


    def _judge_restore(self, r: Restore, findings: list[Finding], counts: Counter[str]) -> None:
        """The restore's line is the savepoint; the savepoint is a consistent cut holding every
        token; each agent that rolled back to it holds what it held there. Judged with the
        generations of the line the agents reported (none reported: a later recovery
        superseded every order before one was carried out, and there is nothing to judge)."""
        counts["restores"] += 1
        line = self.lines.get(r.recovery_id)
        if line is None:
            counts["restores_superseded"] += 1
            return
        cut = {a: r.cut.get(a, 0) for a in self.agents}
        ordered = {f.agent_id: f.index for f in line}
        what = f"recovery {r.recovery_id} (restore to savepoint {r.savepoint!r})"
        if ordered != cut:
            findings.append(Finding(RESTORES, f"{what} ordered the line {_line_text(line)}, not the savepoint's "
                                              f"checkpoints {cut}"))
            return
        at = {f.agent_id: f for f in line}
        tally, orphaned = self.cut(at)
        for m in orphaned:
            findings.append(Finding(RESTORES, f"{what}: {m.id} ({m.sender} -> {m.receiver}) is received in the "
                                              f"savepoint and not sent in it: an orphan", m.id))
        if not tally.conserved:
            findings.append(Finding(RESTORES, f"{what}: the savepoint holds {tally.in_agents} tokens in agents + "
                                              f"{tally.in_transit} in transit across it = "
                                              f"{tally.in_agents + tally.in_transit}, not {self.total}"))
        for rb in self.rollbacks:
            if rb.recovery_id != r.recovery_id:
                continue
            counts["restored_agents"] += 1
            expected = self.held(at[rb.agent])
            if rb.tokens != expected:
                findings.append(Finding(RESTORES, f"{what}: {rb.agent} holds {rb.tokens} tokens after rolling back "
                                                  f"to checkpoint {rb.index}, where it held {expected}"))


def fences_of(line: Iterable[Iterable[object]]) -> list[Fence]:
    """A journal's [[agent, checkpoint index, generation], ...] as fences."""
    return [Fence(str(a), int(g), int(i)) for a, i, g in line]  # type: ignore[misc, call-overload]


def _line_text(fences: Iterable[Fence]) -> str:
    return "{" + ", ".join(f"{f.agent_id}: {f.index}@g{f.generation}" for f in fences) + "}"
