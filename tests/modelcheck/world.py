"""The model around the real core: agent processes, the network, the leader's duties.

One `World` is one global state. Everything in it is an immutable value, so a world
hashes by content. The replicated part is `records` (replica.py): every change to it
goes through the real applier and state machine. The rest is what the core cannot
see: each agent process's volatile state and its checkpoint blobs, the messages in
flight, the leader's proposals not yet committed, and the budgets that bound the
search. `sends` and `undone` are ghost state for the invariants only: every send
made, and those a process later undid by restoring a checkpoint from before it.

The agent side is modelled minimally: the library's sans-I/O protocol runs as
generators over protobuf messages, blob stores and delivery logs, which can be
neither hashed nor copied, so a process here keeps the protocol's decisions in plain
values (report a dependency before delivering; a refused report is not delivered; a
rollback order is obeyed by restoring its checkpoint and then acknowledged; a
refused token ends the process) and takes the checkpointing rule itself from the
library (agent_client.rules: what to piggyback, when to force a checkpoint). A
delivery is logged, the log outlives the process, and a rollback order re-delivers
from it what the library would (`_owe_redeliveries`); a message held already is a
duplicate. Each message carries one token (invariants.tokens_conserved).
Dependency batching and blob integrity are not modelled.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from agent_client import protocol
from agent_client.envelope import Envelope
from agent_client.rules import Rule, rule_for
from coordinator.core import commands as c
from coordinator.core.decisions import epoch_commands
from coordinator.core.errors import ReasonCode
from coordinator.core.history import Dependency
from coordinator.core.model import (
    AgentState, Checkpoint, CheckpointKind, GroupSpec, GroupState, Mode, Order, OrderKind,
)
from coordinator.wire import MODE_TO_PB
from tests.modelcheck import replica
from tests.modelcheck.replica import Records, View, view_of

GROUP = "g"
SAVEPOINT = "sp"
SHA = "ab" * 32
FENCED = frozenset({ReasonCode.STALE_INCARNATION, ReasonCode.AGENT_NOT_ALIVE})
MAX_IN_FLIGHT = 2  # leader proposals not yet committed
DUE = 1e12  # "late enough": the leader's decisions asked as if every timer had run out


@dataclass(frozen=True)
class Bounds:
    """What keeps the search finite."""

    mode: Mode
    agents: int = 3
    failures: int = 1  # crashes plus lease expiries of an agent that did not crash
    leader_changes: int = 1
    sends: int = 1  # per agent
    max_index: int = 2  # highest checkpoint index an agent takes
    losses: int = 1  # messages duplicated, requests and answers lost (and retried)
    epochs: int = 2  # coordinated: epochs the leader starts
    restores: int = 0  # an operator's restores of the group to a savepoint (taken first, once)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple("abcdefgh"[:self.agents])


@dataclass(frozen=True, order=True)
class Msg:
    mid: str
    sender: str
    receiver: str
    generation: int
    interval: int
    epoch: int
    piggyback: bytes


@dataclass(frozen=True)
class Held:
    """A delivery in an agent's state: the message and the interval it was received in."""

    mid: str
    sender: str
    received: int


@dataclass(frozen=True, order=True)
class Logged:
    """A delivery in the agent's delivery log: the message and the interval it was
    received in (delivery_log.py; the library re-delivers from it after a rollback)."""

    msg: Msg
    received: int


@dataclass(frozen=True)
class Saved:
    """A checkpoint's blob: what the agent's state held when it took it."""

    index: int
    held: tuple[Held, ...]
    rule: str
    cut_epoch: int
    uri: str


# Every blob the model wrote, by its URI: a URI names one blob content in every world
# (the URI ends in a hash of the content), so this holds for every world, and it names a
# blob the moment any world can (symmetry.py renders a URI as the blob it names).
BLOBS: dict[str, Saved] = {}


@dataclass(frozen=True)
class Pending:
    """A write applied (or not) whose answer was lost: retried with the same request id."""

    request_id: str
    token: c.Token
    kind: CheckpointKind | None  # a checkpoint commit (with `saved`, its blob) ...
    saved: Saved | None
    order_id: int = 0  # ... or an acknowledgement

    def command(self, agent: str) -> c.Command:
        if self.saved is not None and self.kind is not None:
            return _commit_command(agent, self.token, self.saved, self.kind)
        return c.AckOrder(GROUP, agent, self.token, self.order_id)


@dataclass(frozen=True)
class Proc:
    up: bool = True
    incarnation: int = 0
    generation: int = 0
    last: int = 0
    cut_epoch: int = 0
    rule: str = ""
    held: tuple[Held, ...] = ()
    pending: Pending | None = None
    saved: tuple[Saved, ...] = ()  # blobs outlive the process
    log: tuple[Logged, ...] = ()  # so does the delivery log, in the order of delivery
    # The last rollback's re-deliveries still to make, and the records it drops from the
    # log once all are made (protocol.AgentProtocol._backlog; in memory, so a crash forgets them).
    backlog: tuple[Logged, ...] = ()
    owed: tuple[Logged, ...] = ()
    lives: int = 0  # registrations so far (request ids of Register)
    # Started, not yet through the pending rollback order its registration found: the
    # library's start-up (session.Agent.start: register, restore, sync_orders, atomically)
    # obeys it before the agent's code runs.
    starting: bool = False


@dataclass(frozen=True, order=True)
class Send:
    sender: str
    mid: str
    generation: int
    interval: int


@dataclass(frozen=True)
class World:
    records: Records
    procs: tuple[Proc, ...]
    net: tuple[Msg, ...] = ()
    in_flight: tuple[tuple[str, c.Command], ...] = ()  # sorted: the model commits them in any order
    failures: int = 0
    leader_changes: int = 0
    losses: int = 0
    epochs: int = 0
    suspected: frozenset[tuple[str, int]] = frozenset()  # (agent, incarnation) crashed or expired
    sends: tuple[Send, ...] = ()
    undone: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()  # checkpoints a restore needed whose blob was gone
    late: tuple[tuple[str, "Pending"], ...] = ()  # (agent, write) of ended processes still on their way
    restores: int = 0

    @property
    def budgets(self) -> tuple[int, int, int, int]:
        """The budgets that only enable moves (subsumption.py): each is read only as a
        move's guard and spent one at a time. `restores` is not one of them: a
        restore's request id names it."""
        return self.failures, self.leader_changes, self.losses, self.epochs

    def without_budgets(self) -> World:
        return with_changes(self, failures=0, leader_changes=0, losses=0, epochs=0)

    def writes(self) -> list[Pending]:
        """Every write the model may still send again: processes' retries and late ones."""
        return [p.pending for p in self.procs if p.pending is not None] + [w for _, w in self.late]

    def retriable(self) -> set[str]:
        return {w.request_id for w in self.writes()}


# ---- what a step tells the invariants ----------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One transition: its label, the worlds around it, and the writes it applied."""

    label: str
    before: World
    after: World
    applied: tuple["Applied", ...] = ()


@dataclass(frozen=True)
class Applied:
    """One log entry applied in a step, with the records around it."""

    before: Records
    after: Records
    request_id: str
    command: c.Command
    result: c.Result
    changed: bool  # whether it changed a record outside the dedupe table (it was applied)


# ---- the rule of a process, as a value ---------------------------------------------------

def _rule(bounds: Bounds, agent: str, doc: str) -> Rule:
    rule = rule_for(MODE_TO_PB[bounds.mode], agent, bounds.names)
    if doc:
        rule.state = type(rule.state)(**json.loads(doc))  # type: ignore[attr-defined]
    return rule


def _doc(rule: Rule) -> str:
    state = getattr(rule, "state", None)
    return "" if state is None else json.dumps(vars(state), sort_keys=True)  # flat: ints, bools and lists


def _restored_rule(bounds: Bounds, agent: str, saved: Saved | None) -> str:
    rule = rule_for(MODE_TO_PB[bounds.mode], agent, bounds.names)
    rule.load_json(json.loads(saved.rule) if saved else None, saved.index if saved else 0)
    return _doc(rule)


# ---- the initial world -------------------------------------------------------------------

def initial(bounds: Bounds) -> World:
    """The group created and every agent registered, cold-started, with budgets full."""
    spec = GroupSpec(GROUP, bounds.mode, retention=0, checkpoint_interval_s=1.0)
    records, _ = replica.apply((), "create", c.CreateGroup(spec), ())
    procs = []
    for name in bounds.names:
        records, result = replica.apply(records, f"{name}-reg-0", c.Register(GROUP, name), ())
        assert isinstance(result, c.RegisterResult), result
        procs.append(Proc(incarnation=result.agent.incarnation, generation=result.agent.generation,
                          rule=_restored_rule(bounds, name, None), lives=1))
    return World(records, tuple(procs), failures=bounds.failures, leader_changes=bounds.leader_changes,
                 losses=bounds.losses, epochs=bounds.epochs if bounds.mode is Mode.COORDINATED else 0,
                 restores=bounds.restores)


# ---- transitions -------------------------------------------------------------------------

_FIELDS: dict[type, frozenset[str]] = {}
T = TypeVar("T")


def with_changes(value: T, **changes: object) -> T:
    """dataclasses.replace(value, **changes) for the model's frozen dataclasses (no
    __post_init__, no init-only fields), without replace's introspection of every
    field on every call: the search's most frequent copy."""
    names = _FIELDS.get(type(value))
    if names is None:
        names = _FIELDS[type(value)] = frozenset(f.name for f in dataclasses.fields(value))  # type: ignore[arg-type]
    if not changes.keys() <= names:
        raise TypeError(f"{type(value).__name__} has no field {sorted(changes.keys() - names)}")
    copy = object.__new__(type(value))
    copy.__dict__.update(value.__dict__, **changes)
    return copy


class Builder:
    """Applies commands to a world under construction and records what was applied."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.applied: list[Applied] = []

    def apply(self, request_id: str, command: c.Command) -> c.Result:
        before = self.world.records
        after, result = replica.apply(before, request_id, command, self.world.retriable())
        self.applied.append(Applied(before, after, request_id, command, result, replica.domain_changed(before, after)))
        self.world = with_changes(self.world, records=after)
        return result

    def proc(self, i: int, **changes: object) -> None:
        procs = list(self.world.procs)
        procs[i] = with_changes(procs[i], **changes)
        self.world = with_changes(self.world, procs=tuple(procs))

    def set(self, **changes: object) -> None:
        self.world = with_changes(self.world, **changes)

    def step(self, label: str, before: World) -> Step:
        return Step(label, before, _without_dead_blobs(self.world), tuple(self.applied))


def _without_dead_blobs(world: World) -> World:
    """The world without the blobs nothing can read again.

    A blob is read only by a restore, through the committed record that names it
    (`_restore`), and a record naming a blob is written only by a commit, which writes
    the blob first or holds it in the write it retries (`Pending.saved`). A blob that
    no record and no such write names is therefore never read before it is written
    anew (blobs are named by their content), so worlds that differ only in such blobs
    behave alike, and no invariant reads them (needed_checkpoints_kept reads the
    blobs records name)."""
    if not any(p.saved for p in world.procs):
        return world
    view = view_of(world.records, GROUP)
    named = {r.blob_uri for agent in view.agents() for r in view.checkpoints(agent.agent_id)}
    named |= {w.saved.uri for w in world.writes() if w.saved is not None}
    if all(s.uri in named for p in world.procs for s in p.saved):
        return world
    procs = tuple(with_changes(p, saved=tuple(s for s in p.saved if s.uri in named)) for p in world.procs)
    return with_changes(world, procs=procs)


def _token(p: Proc, epoch: int = 0) -> c.Token:
    return c.Token(p.incarnation, epoch)


def _refused(result: c.Result) -> ReasonCode | None:
    return result.reason_code if isinstance(result, c.Failure) else None


def _down(b: Builder, bounds: Bounds, i: int) -> None:
    """The process ends (a crash, or told its incarnation is fenced): only its blobs stay,
    and a write it was retrying may still arrive, late. Its delivery log stays, the
    records of re-deliveries it still owed included (dropped only once all are made)."""
    p = b.world.procs[i]
    if p.pending is not None:
        b.set(late=b.world.late + ((bounds.names[i], p.pending),))
    b.proc(i, **{f.name: f.default for f in dataclasses.fields(Proc) if f.name not in ("saved", "lives", "log")})
    b.proc(i, up=False, incarnation=p.incarnation)


def _restore(b: Builder, bounds: Bounds, i: int, index: int, generation: int) -> bool:
    """Restore checkpoint `index` from its blob (False: the blob is gone) and undo, in the
    ghost record, this agent's older sends after it."""
    name = bounds.names[i]
    p = b.world.procs[i]
    record = view_of(b.world.records, GROUP).state.checkpoint(GROUP, name, index) if index else None
    saved = next((s for s in p.saved if record is not None and s.uri == record.blob_uri), None)
    if index and saved is None:
        b.set(missing=b.world.missing | {f"{name}/{index}"})
        return False
    b.proc(i, last=index, generation=generation, held=saved.held if saved else (),
           cut_epoch=saved.cut_epoch if saved else 0, rule=_restored_rule(bounds, name, saved))
    undone = {s.mid for s in b.world.sends if s.sender == name and s.generation < generation and s.interval > index}
    b.set(undone=b.world.undone | undone)
    return True


def _commit(b: Builder, bounds: Bounds, i: int, index: int, kind: CheckpointKind, epoch: int,
            lose: str = "") -> c.Result | None:
    """Take a checkpoint: the blob first, then the commit. None: the request ("request")
    or its answer ("answer") was lost; the process retries it."""
    name = bounds.names[i]
    p = b.world.procs[i]
    rule = _rule(bounds, name, p.rule)
    doc = json.dumps(rule.to_json(), sort_keys=True)  # what the library saves of its rule
    content = hashlib.sha256(repr((p.held, doc, epoch)).encode()).hexdigest()[:12]
    saved = Saved(index, p.held, doc, epoch, f"file:///blobs/{name}/{index}.{content}")  # content-addressed
    BLOBS[saved.uri] = saved
    rule.on_checkpoint(index)
    command = _commit_command(name, _token(p, epoch), saved, kind)
    request_id = f"{name}-{p.incarnation}-{p.generation}-cp-{index}"
    b.proc(i, saved=tuple(sorted(set(p.saved) | {saved}, key=lambda s: s.uri)))  # the blob before the commit
    if lose:
        b.proc(i, pending=Pending(request_id, command.token, kind, saved))
        if lose == "answer":
            b.apply(request_id, command)
        return None
    return _committed(b, bounds, i, b.apply(request_id, command), saved, _doc(rule))


def _commit_command(agent: str, token: c.Token, saved: Saved, kind: CheckpointKind) -> c.CommitCheckpoint:
    return c.CommitCheckpoint(token, Checkpoint(GROUP, agent, saved.index, saved.cut_epoch, kind, saved.uri, SHA, 100))


def _committed(b: Builder, bounds: Bounds, i: int, result: c.Result, saved: Saved, rule_doc: str) -> c.Result:
    if isinstance(result, c.CheckpointResult):
        p = b.world.procs[i]
        b.proc(i, last=saved.index, cut_epoch=max(p.cut_epoch, saved.cut_epoch), rule=rule_doc)
    elif _refused(result) in FENCED:
        _down(b, bounds, i)
    return result


Move = tuple[str, Callable[[], "Step | None"]]  # (label, builds the step; None: past a bound)


def moves(world: World, bounds: Bounds) -> Iterator[Move]:
    """Every enabled transition, as (label, thunk building its step)."""
    view = view_of(world.records, GROUP)
    for i, p in enumerate(world.procs):
        yield from _agent_moves(world, bounds, view, i, p)
    for msg in dict.fromkeys(world.net):  # each message once, however many copies
        if world.losses:
            yield f"duplicate {msg.mid}", lambda msg=msg: _duplicate(world, msg)
    for k, (_, write) in enumerate(world.late):
        yield f"late {write.request_id}", lambda k=k: _late(world, k)
    yield from _leader_moves(world, bounds, view)


def _agent_moves(world: World, bounds: Bounds, view: View, i: int, p: Proc) -> Iterator[Move]:
    name = bounds.names[i]
    if p.up and (world.failures or (name, p.incarnation) in world.suspected):
        yield f"crash {name}", lambda: _crash(world, bounds, i)
    if not p.up:
        yield f"restart {name}", lambda: _restart(world, bounds, i)
        return
    if p.pending is not None:
        yield f"retry {name} {p.pending.request_id}", lambda: _retry(world, bounds, i)
        return
    server = view.agent(name)
    assert server is not None
    live = server.incarnation == p.incarnation and server.state is AgentState.ALIVE
    if not live:
        yield f"fenced {name}", lambda: _fenced(world, bounds, i)
    if p.backlog:
        # The library finishes re-delivering before anything else (finish_redelivery
        # opens every operation but a rollback); a re-delivery refused because a
        # rollback is owed obeys that rollback, which re-delivers from the log instead.
        entry = p.backlog[0]
        yield (f"re-deliver {name}<-{entry.msg.mid}",
               lambda: _receive(world, bounds, i, entry.msg, redelivery=True))
        yield from _order_moves(world, bounds, view, i, live, rollbacks_only=True)
        return
    if p.starting:
        yield from _order_moves(world, bounds, view, i, live)
        return
    sent = sum(1 for s in world.sends if s.sender == name)
    if sent < bounds.sends:
        for j, other in enumerate(bounds.names):
            if j != i:
                yield f"send {name}->{other}", lambda j=j: _send(world, bounds, i, j)
    for msg in dict.fromkeys(world.net):  # each message once, however many copies
        if msg.receiver == name:
            yield f"receive {name}<-{msg.mid}", lambda msg=msg: _receive(world, bounds, i, msg)
    if bounds.mode is not Mode.COORDINATED and p.last < bounds.max_index:
        kind = CheckpointKind.BASIC
        yield f"checkpoint {name} {p.last + 1}", lambda: _checkpoint(world, bounds, i, p.last + 1, kind, 0)
        for lost in ("request", "answer") if world.losses else ():
            yield (f"checkpoint {name} {p.last + 1} ({lost} lost)",
                   lambda lost=lost: _checkpoint(world, bounds, i, p.last + 1, kind, 0, lose=lost))
    yield from _order_moves(world, bounds, view, i, live)


def _order_moves(world: World, bounds: Bounds, view: View, i: int, live: bool,
                 rollbacks_only: bool = False) -> Iterator[Move]:
    name = bounds.names[i]
    p = world.procs[i]
    for order in view.orders():
        if order.agent_id != name or not live or (rollbacks_only and order.kind is not OrderKind.ROLL_BACK):
            continue
        if order.kind is OrderKind.ROLL_BACK:
            yield f"obey {name} order {order.order_id}", lambda o=order: _obey(world, bounds, i, o)
            if world.losses:
                yield (f"obey {name} order {order.order_id} (ack answer lost)",
                       lambda o=order: _obey(world, bounds, i, o, lose=True))
        elif order.kind is OrderKind.CHECKPOINT_NOW and order.epoch > p.cut_epoch and p.last < bounds.max_index:
            yield (f"cut {name} epoch {order.epoch}",
                   lambda o=order: _checkpoint(world, bounds, i, p.last + 1, CheckpointKind.COORDINATED, o.epoch))


def _failing(key: tuple[str, int]) -> str:
    """The request id of the leader's proposal that an agent's incarnation failed."""
    return f"leader-fail-{key[0]}-{key[1]}"


def _leader_moves(world: World, bounds: Bounds, view: View) -> Iterator[Move]:
    """The leader's duties, derived from the replicated state and its own proposals not
    yet committed, as the real leader derives them on every tick: an expired lease is
    proposed again after a refused or lost proposal, never twice at once."""
    room = len(world.in_flight) < MAX_IN_FLIGHT
    proposals = {request_id for request_id, _ in world.in_flight}
    for agent in view.agents():
        key = (agent.agent_id, agent.incarnation)
        if (room and agent.state is AgentState.ALIVE and _failing(key) not in proposals
                and (key in world.suspected or world.failures)):
            yield f"lease of {key[0]}#{key[1]} expires", lambda key=key: _expire(world, key)
    group = view.group()
    current = view.epoch(group.current_epoch) if group.current_epoch else None
    for command in epoch_commands(group, current, DUE):
        starting = isinstance(command, c.StartEpoch)
        if room and (world.epochs or not starting) and all(cmd != command for _, cmd in world.in_flight):
            yield f"leader proposes {type(command).__name__}", lambda cmd=command: _propose(world, cmd)
    for k, (request_id, _command) in enumerate(world.in_flight):
        yield f"commit {request_id}", lambda k=k: _commit_in_flight(world, k)
    if world.leader_changes:
        for keep in range(1 << len(world.in_flight)):
            yield f"leader change keeping {keep:b}", lambda keep=keep: _leader_change(world, keep)
    if group.state is GroupState.RUNNING:
        yield "garbage collect", lambda: _gc(world, bounds)
    if world.restores:
        if view.state.savepoint(GROUP, SAVEPOINT) is None:
            yield "operator takes a savepoint", lambda: _operator(world, "savepoint",
                                                                  c.CreateSavepoint(GROUP, SAVEPOINT))
        else:
            yield "operator restores the savepoint", lambda: _operator(
                world, f"restore-{world.restores}", c.RestoreGroup(GROUP, SAVEPOINT), restores=world.restores - 1)


def _crash(world: World, bounds: Bounds, i: int) -> Step:
    b = Builder(world)
    p = world.procs[i]
    key = (bounds.names[i], p.incarnation)
    if key not in world.suspected:
        b.set(failures=world.failures - 1, suspected=world.suspected | {key})
    _down(b, bounds, i)
    return b.step(f"crash {key[0]}", world)


def _restart(world: World, bounds: Bounds, i: int) -> Step:
    b = Builder(world)
    name = bounds.names[i]
    p = world.procs[i]
    result = b.apply(f"{name}-reg-{p.lives}", c.Register(GROUP, name))
    assert isinstance(result, c.RegisterResult), result
    owed = any(o.agent_id == name and o.kind is OrderKind.ROLL_BACK and not o.acked
               for o in view_of(b.world.records, GROUP).orders())
    b.proc(i, up=True, incarnation=result.agent.incarnation, lives=p.lives + 1, starting=owed)
    index = result.resume_from.index if result.resume_from else 0
    _restore(b, bounds, i, index, result.agent.generation)
    return b.step(f"restart {name} (incarnation {result.agent.incarnation}, resume {index})", world)


def _fenced(world: World, bounds: Bounds, i: int) -> Step:
    b = Builder(world)
    _down(b, bounds, i)
    return b.step(f"{bounds.names[i]} learns it is fenced and ends", world)


def _send(world: World, bounds: Bounds, i: int, j: int) -> Step:
    b = Builder(world)
    name, to = bounds.names[i], bounds.names[j]
    p = world.procs[i]
    rule = _rule(bounds, name, p.rule)
    piggyback = rule.on_send(to)
    mid = f"{name}{sum(1 for s in world.sends if s.sender == name) + 1}"
    msg = Msg(mid, name, to, p.generation, p.last + 1, p.cut_epoch, piggyback)
    b.proc(i, rule=_doc(rule))
    b.set(net=tuple(sorted(world.net + (msg,))), sends=tuple(sorted(world.sends + (
        Send(name, mid, p.generation, p.last + 1),))))
    return b.step(f"send {mid} {name}->{to} (generation {p.generation}, interval {p.last + 1})", world)


def _receive(world: World, bounds: Bounds, i: int, msg: Msg, redelivery: bool = False) -> Step | None:
    """Drop a duplicate (a message the agent's state holds); else cut or force a
    checkpoint if the rule says so, report the dependency, and deliver only if the
    report is accepted (the library's default, dependency_batch=1), logging the
    delivery. A re-delivery takes the message from the backlog instead of the network."""
    b = Builder(world)
    name = bounds.names[i]
    p = world.procs[i]
    how = "re-deliver" if redelivery else "receive"

    def done() -> None:
        """The message leaves the network or the backlog (one copy of it); the last
        re-delivery drops the rollback's old records from the log."""
        if not redelivery:
            b.set(net=_without_one(b.world.net, msg))
            return
        q = b.world.procs[i]
        b.proc(i, backlog=q.backlog[1:])
        if not q.backlog[1:]:
            b.proc(i, log=_without(q.log, q.owed), owed=())

    if any(h.mid == msg.mid for h in p.held):
        done()
        return b.step(f"{how} {msg.mid} to {name}: a duplicate, dropped", world)
    if bounds.mode is Mode.COORDINATED:
        if msg.epoch > p.cut_epoch:
            if p.last >= bounds.max_index:
                return None  # the cut it needs is past the bound
            result = _commit(b, bounds, i, p.last + 1, CheckpointKind.COORDINATED, msg.epoch)
            if _refused(result) in FENCED | {ReasonCode.ORDER_PENDING}:
                return b.step(f"{how} {msg.mid}: cut refused ({_refused(result)})", world)
    else:
        forced = _rule(bounds, name, p.rule).forced_index(msg.sender, msg.piggyback, p.last)
        if forced is not None:
            if forced > bounds.max_index:
                return None  # the checkpoint it forces is past the bound
            result = _commit(b, bounds, i, forced, CheckpointKind.FORCED, 0)
            if isinstance(result, c.Failure):
                return b.step(f"{how} {msg.mid}: forced checkpoint {forced} refused ({result.reason_code})", world)
    p = b.world.procs[i]
    interval = p.last + 1
    record = Dependency(msg.sender, msg.interval, name, interval, msg.mid, msg.generation)
    result = b.apply(f"{name}-{p.incarnation}-{p.generation}-deps-{msg.mid}",
                     c.ReportDependencies(GROUP, name, _token(p, p.cut_epoch), (record,)))
    why = _refused(result)
    if why is ReasonCode.ORDER_PENDING:
        return b.step(f"{how} {msg.mid}: refused, a rollback is owed", world)
    if why in FENCED:  # unwrap raised: the message was not taken, the next incarnation gets it
        _down(b, bounds, i)
        return b.step(f"{how} {msg.mid}: refused, {name} is fenced", world)
    if redelivery and why not in (None, ReasonCode.ORPHAN_MESSAGE):  # raised: the backlog stays for later
        return b.step(f"{how} {msg.mid}: refused ({why}), kept for later", world)
    done()
    if why is not None:
        return b.step(f"{how} {msg.mid}: refused ({why}), dropped", world)
    rule = _rule(bounds, name, p.rule)
    rule.on_deliver(msg.sender, msg.piggyback)
    b.proc(i, rule=_doc(rule), held=p.held + (Held(msg.mid, msg.sender, interval),),
           log=b.world.procs[i].log + (Logged(msg, interval),))
    return b.step(f"{'re-deliver' if redelivery else 'deliver'} {msg.mid} to {name} in interval {interval}", world)


def _without_one(net: tuple[Msg, ...], msg: Msg) -> tuple[Msg, ...]:
    k = net.index(msg)
    return net[:k] + net[k + 1:]


def _checkpoint(world: World, bounds: Bounds, i: int, index: int, kind: CheckpointKind, epoch: int,
                lose: str = "") -> Step:
    b = Builder(world)
    if lose:
        b.set(losses=world.losses - 1)
    result = _commit(b, bounds, i, index, kind, epoch, lose)
    outcome = f"{lose} lost" if result is None else (_refused(result) or "committed")
    return b.step(f"checkpoint {bounds.names[i]} {index} ({kind.value}, epoch {epoch}): {outcome}", world)


def _retry(world: World, bounds: Bounds, i: int) -> Step:
    b = Builder(world)
    p = world.procs[i]
    assert p.pending is not None
    pending = p.pending
    result = b.apply(pending.request_id, pending.command(bounds.names[i]))
    b.proc(i, pending=None)
    if pending.saved is not None:
        rule = _rule(bounds, bounds.names[i], p.rule)
        rule.on_checkpoint(pending.saved.index)  # the live rule moves on once the commit is answered
        _committed(b, bounds, i, result, pending.saved, _doc(rule))
    elif _refused(result) in FENCED:
        _down(b, bounds, i)
    elif _refused(result) is not None:  # an acknowledgement refused: the rollback stops short of re-delivering
        b.proc(i, backlog=(), owed=())
    return b.step(f"retry {pending.request_id}: {_refused(result) or type(result).__name__}", world)


def _obey(world: World, bounds: Bounds, i: int, order: Order, lose: bool = False) -> Step:
    b = Builder(world)
    name = bounds.names[i]
    p = world.procs[i]
    generation = max(p.generation, order.generation)
    index = order.checkpoint_index
    if not _restore(b, bounds, i, index, generation):
        return b.step(f"obey {name}: checkpoint {index} has no blob", world)
    b.proc(i, starting=False)
    p = b.world.procs[i]
    command = c.AckOrder(GROUP, name, _token(p, p.cut_epoch), order.order_id)
    request_id = f"{name}-{p.incarnation}-ack-{order.order_id}"
    if lose:
        b.set(losses=world.losses - 1)
        b.proc(i, pending=Pending(request_id, command.token, None, None, command.order_id))
    result = b.apply(request_id, command)
    if not lose and _refused(result) in FENCED:
        _down(b, bounds, i)
    elif lose or _refused(result) is None:
        _owe_redeliveries(b, i, order)
    return b.step(f"obey {name}: roll back to {index} (generation {generation}), acknowledge order "
                  f"{order.order_id}{' (answer lost)' if lose else ''}", world)


def _owe_redeliveries(b: Builder, i: int, order: Order) -> None:
    """After a rollback is acknowledged (its answer retried first if lost), the library
    re-delivers, in the log's order, each logged message received after the restored
    checkpoint whose send the order's line did not undo (protocol.AgentProtocol.
    _redeliver, with the library's own undone_by), and once all are made drops those
    records (each re-delivery logged its message anew). This replaces what a previous
    rollback still owed: its records are still in the log."""
    p = b.world.procs[i]
    line = {f.agent_id: f for f in order.line}
    since = tuple(e for e in p.log if e.received > order.checkpoint_index)
    backlog = tuple(e for e in since if not protocol.undone_by(line, _envelope(e.msg)))
    if backlog:
        b.proc(i, backlog=backlog, owed=since)
    else:
        b.proc(i, log=_without(p.log, since), backlog=(), owed=())


def _without(log: tuple[Logged, ...], records: tuple[Logged, ...]) -> tuple[Logged, ...]:
    """The log less one occurrence of each of `records` (the first: the oldest)."""
    out = list(log)
    for record in records:
        out.remove(record)
    return tuple(out)


def _envelope(msg: Msg) -> Envelope:
    return Envelope(msg.mid, msg.sender, msg.receiver, msg.generation, 1, msg.interval, msg.epoch, msg.piggyback, b"")


def _duplicate(world: World, msg: Msg) -> Step:
    """The network delivers a message twice: a transport that retries after a lost
    acknowledgement (a loss that is retried is only a delay, which the interleavings
    cover)."""
    b = Builder(world)
    b.set(net=tuple(sorted(world.net + (msg,))), losses=world.losses - 1)
    return b.step(f"the network duplicates {msg.mid}", world)


def _late(world: World, k: int) -> Step:
    b = Builder(world)
    agent, write = world.late[k]
    b.set(late=world.late[:k] + world.late[k + 1:])
    result = b.apply(write.request_id, write.command(agent))
    return b.step(f"late write {write.request_id} of an ended process arrives: {_refused(result) or 'accepted'}", world)


def _expire(world: World, key: tuple[str, int]) -> Step:
    b = Builder(world)
    if key not in world.suspected:
        b.set(failures=world.failures - 1, suspected=world.suspected | {key})
    command = c.DeclareAgentFailed(GROUP, *key)
    b.set(in_flight=_sorted(world.in_flight + ((_failing(key), command),)))
    return b.step(f"lease of {key[0]} incarnation {key[1]} expires: leader proposes its failure", world)


def _propose(world: World, command: c.Command) -> Step:
    b = Builder(world)
    if isinstance(command, c.StartEpoch):
        b.set(epochs=world.epochs - 1)
    b.set(in_flight=_sorted(world.in_flight + ((f"leader-{type(command).__name__}", command),)))
    return b.step(f"leader proposes {command}", world)


def _sorted(in_flight: tuple[tuple[str, c.Command], ...]) -> tuple[tuple[str, c.Command], ...]:
    """Proposals by request id (each names its command): worlds that proposed the same
    ones in another order are one world."""
    return tuple(sorted(in_flight, key=lambda proposal: (proposal[0], repr(proposal[1]))))


def _commit_in_flight(world: World, k: int) -> Step:
    b = Builder(world)
    request_id, command = world.in_flight[k]
    b.set(in_flight=world.in_flight[:k] + world.in_flight[k + 1:])
    result = b.apply(request_id, command)
    return b.step(f"commit {request_id}: {_refused(result) or result}", world)


def _leader_change(world: World, keep: int) -> Step:
    """A new leader: the old one's uncommitted proposals are committed later (kept) or
    lost; the new one re-derives its duties from the replicated state."""
    b = Builder(world)
    kept = tuple(e for k, e in enumerate(world.in_flight) if keep >> k & 1)
    b.set(in_flight=kept, leader_changes=world.leader_changes - 1)
    return b.step(f"leader change (keeps {[rid for rid, _ in kept]})", world)


def _operator(world: World, request_id: str, command: c.Command, **changes: object) -> Step:
    """An operator's savepoint or restore, applied as one log entry; a restore's orders are
    then obeyed (or superseded) like a failure recovery's."""
    b = Builder(world)
    b.set(**changes)
    result = b.apply(request_id, command)
    return b.step(f"operator: {type(command).__name__}: {_refused(result) or result}", world)


def _gc(world: World, bounds: Bounds) -> Step:
    """An operator's garbage collection; the blobs it names are deleted."""
    b = Builder(world)
    result = b.apply("gc", c.GarbageCollect(GROUP))
    if isinstance(result, c.GcResult):
        gone = set(result.deletable_blob_uris)
        for i, p in enumerate(b.world.procs):
            kept = tuple(s for s in p.saved if s.uri not in gone)
            b.proc(i, saved=kept)
    return b.step(f"garbage collect: {_refused(result) or result}", world)
