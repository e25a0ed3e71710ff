"""The metadata workload: concurrent checkpoint-metadata traffic against a cluster, as a history.

It needs nothing but a list of gRPC endpoints (proxied or not) and knows nothing
of faults: a nemesis runs beside it and records its own ops in the same history.
Processes (threads; each a Jepsen process with one open operation at a time and
its own leader-following Connection):

- agent processes "p0".."pN-1": each drives one agent in every group: checkpoint
  commits with rising indexes (for coordinated groups, one per open epoch), batches
  of dependency reports, reads (GetGroup, ListCheckpoints, WhatIf), occasional
  GarbageCollect, and deliberate re-sends of requests that already completed.
- "epochs": starts an epoch of each coordinated group once the last one closed.
- "recoverer": re-registers a live agent (which declares its previous incarnation
  failed and starts a recovery), then watches and acknowledges the rollback
  orders of the whole group.
- "zombie": writes with retired incarnations and with closed or unstarted epochs;
  every such write must be refused.
- "sampler": node samples (chaos.sampler).

A recovery holds its group's lock exclusively and every other operation on the
group holds it shared, so the state a recovery line is computed on is pinned down
by the history (up to operations whose outcome stayed unknown). An operation that
ends `info` is re-sent with the same request id (recorded with `retry_of`) until
it gets an answer or the run ends. Groups use long leases: no agent is declared
failed behind the history's back. What is recorded: chaos.workloads.metadata_ops.
"""
from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from chaos.client import Outcome, RecordingClient, Request
from chaos.history import CRASHED, INFO, History
from chaos.sampler import NodeSampler, await_convergence
from chaos.workloads import metadata_ops as ops
from chaos.workloads.metadata_ops import WRITES
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.locks import SharedExclusiveLock

MODES = {"COORDINATED": pb.COORDINATED, "CIC_BCS": pb.CIC_BCS, "UNCOORDINATED": pb.UNCOORDINATED}
MAX_TRIES = 4  # sends of one request that ended `info`, the first included
LOCK_WAIT_S = 0.5
# A coordinated checkpoint refused because its epoch is no longer (or not yet, or not
# for this agent) the open one: nothing to cut, wait for the next epoch.
EPOCH_CLOSED = (pb.REASON_NOT_OPEN_EPOCH, pb.REASON_JOINED_AFTER_EPOCH, pb.REASON_EPOCH_NOT_STARTED)


@dataclass(frozen=True)
class MetadataConfig:
    duration_s: float = 10.0
    max_ops: int = 5000
    agent_processes: int = 3  # also the number of agents per group
    modes: tuple[str, ...] = ("COORDINATED", "CIC_BCS", "UNCOORDINATED")
    prefix: str = "md"  # group names: <prefix>-<run>-<mode>
    # A call's overall deadline, leader retries included: short, so an operation
    # caught by a partition completes as `info` instead of hanging the process.
    deadline_s: float = 3.0
    rpc_timeout_s: float = 1.0
    think_s: float = 0.005
    recovery_period_s: float = 1.5
    zombie_period_s: float = 0.3
    epoch_poll_s: float = 0.2
    sample_period_s: float = 0.25
    watch_window_s: float = 0.4
    retry_probability: float = 0.08
    register_retry_probability: float = 0.3  # a re-registration sent again at once
    gc_probability: float = 0.015
    what_if_probability: float = 0.03
    read_probability: float = 0.12
    deps_per_report: int = 4
    lease_ttl_s: float = 3600.0
    epoch_timeout_s: float = 120.0
    retention: int = 2
    seed: int = 0


@dataclass
class AgentModel:
    """What the workload believes about one agent; only used to build plausible requests."""

    group: str
    agent: str
    incarnation: int = 0
    retired: list[int] = field(default_factory=list)  # zombie material
    last_index: int = 0  # newest checkpoint believed stored: the next event's interval is last_index + 1
    next_index: int = 1
    epochs_done: set[int] = field(default_factory=set)


@dataclass
class GroupModel:
    name: str
    mode: str
    agents: dict[str, AgentModel]
    lock: SharedExclusiveLock = field(default_factory=SharedExclusiveLock)
    open_epoch: int = 0  # 0: none known to be open
    members: frozenset[str] = frozenset()
    closed_epoch: int = 0

    @property
    def coordinated(self) -> bool:
        return self.mode == "COORDINATED"


@dataclass
class _Sent:
    """A request a process sent: re-sent while its outcome is unknown, or deliberately."""

    request: Request
    invoke_index: int
    on_done: Callable[[Outcome], None] | None
    tries: int = 1


@dataclass
class _Process:
    client: RecordingClient
    rng: random.Random
    done: deque[_Sent] = field(default_factory=lambda: deque(maxlen=30))
    unresolved: deque[_Sent] = field(default_factory=deque)
    thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.client.process


class MetadataWorkload:
    def __init__(self, history: History, endpoints: Sequence[str], config: MetadataConfig = MetadataConfig()) -> None:
        self.history, self.endpoints, self.config = history, list(endpoints), config
        self.run_id = uuid.uuid4().hex[:6]
        names = [f"p{i}" for i in range(config.agent_processes)]
        self.groups = {
            name: GroupModel(name, mode, {a: AgentModel(name, a) for a in names})
            for mode in config.modes for name in [f"{config.prefix}-{self.run_id}-{mode.lower().replace('_', '')}"]}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._ids = itertools.count(1)
        self._ops = 0
        self._deadline = float("inf")
        self._processes: list[_Process] = []
        self.sampler = NodeSampler(history, self.endpoints, config.sample_period_s)

    # ---- lifecycle ---------------------------------------------------------------
    def run(self, during: Callable[[], None] | None = None, convergence_timeout: float = 30.0) -> None:
        """setup, start, `during()` (e.g. the nemesis) while it runs, wait, finish."""
        self.setup()
        self.start()
        try:
            if during is not None:
                during()
            self.wait()
        finally:
            self.finish(convergence_timeout)

    def setup(self, attempts: int = 5) -> None:
        """Create the groups and register every agent (retried: the cluster may still be electing)."""
        proc = self._process("setup", deadline=10.0)
        for g in self.groups.values():
            spec = pb.GroupSpec(group=g.name, mode=MODES[g.mode], lease_ttl_s=self.config.lease_ttl_s,
                                epoch_timeout_s=self.config.epoch_timeout_s, retention=self.config.retention)
            self._until_ok(proc, ops.create_group(self._rid(proc), spec), attempts)
            for a in g.agents.values():
                self._until_ok(proc, ops.register(self._rid(proc), g.name, a.agent), attempts,
                               lambda o, a=a: self._registered(a, o))

    def _until_ok(self, proc: _Process, request: Request, attempts: int,
                  on_done: Callable[[Outcome], None] | None = None) -> None:
        outcome = self._send(proc, request, on_done, resolve=False)
        sent = _Sent(request, outcome.invoke.index, on_done)
        while not outcome.ok and sent.tries < attempts:
            outcome = self._resend(proc, sent, final=True)
        if not outcome.ok:
            raise RuntimeError(f"setup: {request.f} {request.value} did not succeed: {outcome.error}")

    def start(self) -> None:
        self._deadline = time.monotonic() + self.config.duration_s
        self.sampler.start()
        loops: list[tuple[str, Callable[[_Process], None]]] = [
            (f"p{i}", self._agent_loop) for i in range(self.config.agent_processes)]
        loops += [("epochs", self._epoch_loop), ("recoverer", self._recovery_loop), ("zombie", self._zombie_loop)]
        for name, loop in loops:
            proc = self._process(name)
            proc.thread = threading.Thread(target=self._guarded, args=(loop, proc), name=f"chaos-{name}", daemon=True)
            proc.thread.start()

    def _guarded(self, loop: Callable[[_Process], None], proc: _Process) -> None:
        try:
            loop(proc)
        except Exception as exc:  # recorded, so a dead process is visible in the history
            self.history.note(proc.name, CRASHED, {"error": f"{type(exc).__name__}: {exc}"})
            raise

    def wait(self) -> None:
        """Until the duration or the operation budget is used up (bounded)."""
        slack = 4 * self.config.deadline_s + 10
        end = self._deadline + slack
        for proc in self._processes:
            if proc.thread is not None:
                proc.thread.join(max(0.0, end - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def finish(self, convergence_timeout: float = 30.0) -> None:
        """After the faults healed: settle what is still unknown, read the final state,
        and wait for every node to hold the same content."""
        self.stop()
        self.wait()
        for proc in self._processes:
            idle = proc.thread is None or not proc.thread.is_alive()  # else it still has an op open
            while idle and proc.unresolved:  # one more answer for each request still unknown
                self._resend(proc, proc.unresolved.popleft(), final=True)
        final = self._process("final", deadline=10.0)
        for g in self.groups.values():
            state = self._read_group(final, g)
            if not (state.ok and state.response.group.state == pb.RUNNING):
                self._settle_orders(final, g, list(g.agents.values()), keep_going=lambda: True)
            self._send(final, ops.list_checkpoints(self._rid(final), g.name))
        self.sampler.stop()
        await_convergence(self.history, self.endpoints, convergence_timeout)
        for proc in self._processes:
            proc.client.close()

    # ---- plumbing ----------------------------------------------------------------
    def _process(self, name: str, deadline: float | None = None) -> _Process:
        client = RecordingClient(self.history, name, self.endpoints, deadline=deadline or self.config.deadline_s,
                                 rpc_timeout=self.config.rpc_timeout_s)
        proc = _Process(client, random.Random(f"{self.config.seed}-{name}"))
        self._processes.append(proc)
        return proc

    def _rid(self, proc: _Process) -> str:
        return f"{self.run_id}-{proc.name}-{next(self._ids)}"

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline and self._ops < self.config.max_ops

    def _send(self, proc: _Process, request: Request, on_done: Callable[[Outcome], None] | None = None, *,
              resolve: bool = True) -> Outcome:
        self._ops += 1
        outcome = proc.client.send(request)
        self._settled(proc, _Sent(request, outcome.invoke.index, on_done), outcome, resolve)
        return outcome

    def _resend(self, proc: _Process, sent: _Sent, *, final: bool = False) -> Outcome:
        """The same request again (same request id), recorded as a retry of the first send."""
        self._ops += 1
        outcome = proc.client.send(sent.request, retry_of=sent.invoke_index)
        sent.tries += 1
        self._settled(proc, sent, outcome, resolve=not final and sent.tries < MAX_TRIES)
        return outcome

    def _settled(self, proc: _Process, sent: _Sent, outcome: Outcome, resolve: bool) -> None:
        if sent.request.f in WRITES:
            if outcome.type == INFO:
                if resolve:
                    proc.unresolved.append(sent)
            else:
                proc.done.append(sent)
        if sent.on_done is not None and outcome.type != INFO:
            sent.on_done(outcome)

    def _retry_something(self, proc: _Process, group: GroupModel) -> None:
        """Deliberately re-send a completed request of this group: it must be answered as the first time."""
        candidates = [s for s in proc.done if s.request.group == group.name]
        if candidates:
            sent = proc.rng.choice(candidates)
            self._ops += 1
            proc.client.send(sent.request, retry_of=sent.invoke_index)

    def _pause(self, seconds: float) -> bool:
        """Sleep unless stopped; False once the run is over."""
        self._stop.wait(seconds)
        return self._running()

    # ---- model updates -----------------------------------------------------------
    def _registered(self, a: AgentModel, outcome: Outcome) -> None:
        if outcome.ok:
            self._adopt_incarnation(a, outcome.response.incarnation)

    def _adopt_incarnation(self, a: AgentModel, incarnation: int) -> None:
        with self._mutex:
            if incarnation > a.incarnation:
                if a.incarnation:
                    a.retired.append(a.incarnation)
                a.incarnation = incarnation
                a.epochs_done.clear()

    def _take_index(self, a: AgentModel, jump: int = 0) -> int:
        with self._mutex:
            index = a.next_index + jump
            a.next_index = index + 1
            return index

    def _stored(self, a: AgentModel, index: int) -> None:
        with self._mutex:
            a.last_index = index
            a.next_index = max(a.next_index, index + 1)

    def _refresh(self, g: GroupModel, outcome: Outcome) -> None:
        """Bring the model in line with a GetGroup answer (after a refusal, a recovery, a retry)."""
        if not outcome.ok:
            return
        r = outcome.response
        for agent in r.agents:
            a = g.agents.get(agent.agent_id)
            if a is not None and agent.state == pb.AGENT_ALIVE:
                self._adopt_incarnation(a, agent.incarnation)
                with self._mutex:
                    a.next_index = max(a.next_index, agent.last_checkpoint_index + 1)
        if g.coordinated:
            current = next((e for e in r.recent_epochs if e.epoch == r.group.current_epoch), None)
            with self._mutex:
                if current is not None and current.state == pb.EPOCH_STARTED:
                    g.open_epoch, g.members = current.epoch, frozenset(current.members)
                    for agent_id in current.committed:
                        if agent_id in g.agents:
                            g.agents[agent_id].epochs_done.add(current.epoch)
                else:
                    g.open_epoch = 0
                    g.closed_epoch = max(g.closed_epoch, r.group.current_epoch)

    def _read_group(self, proc: _Process, g: GroupModel) -> Outcome:
        return self._send(proc, ops.get_group(self._rid(proc), g.name), lambda o: self._refresh(g, o))

    def _resync(self, proc: _Process, g: GroupModel, a: AgentModel, outcome: Outcome) -> None:
        """A write was refused: catch up with the coordinator (rollback to obey, newer incarnation)."""
        if outcome.refused("FAILED_PRECONDITION", pb.REASON_ORDER_PENDING):
            self._settle_orders(proc, g, [a])
        elif outcome.refused("FAILED_PRECONDITION"):
            self._read_group(proc, g)

    def _settle_orders(self, proc: _Process, g: GroupModel, agents: list[AgentModel], rounds: int = 3,
                       keep_going: Callable[[], bool] | None = None) -> bool:
        """Watch the agents' orders and acknowledge every rollback, until the group runs again.

        Only a GetGroup that shows the group RUNNING proves every rollback order was
        seen (an empty watch may just have been too short), so the loop checks that."""
        window = self.config.watch_window_s
        for _ in range(rounds):
            if not (keep_going or self._running)():
                return False
            for a in agents:
                watched = self._send(proc, ops.watch_orders(self._rid(proc), g.name, a.agent, a.incarnation, window))
                for order in (watched.response if watched.ok else ()):
                    if order.WhichOneof("kind") == "roll_back":
                        index = order.roll_back.checkpoint_index
                        self._send(proc, ops.ack_order(self._rid(proc), g.name, a.agent, a.incarnation, order.order_id),
                                   lambda o, a=a, index=index: o.ok and self._stored(a, index))
            state = self._read_group(proc, g)
            if state.ok and state.response.group.state == pb.RUNNING:
                return True
            agents, window = list(g.agents.values()), 2 * window
        return False

    # ---- agent processes -----------------------------------------------------------
    def _agent_loop(self, proc: _Process) -> None:
        while self._pause(self.config.think_s):
            if proc.unresolved:
                sent = proc.unresolved.popleft()
                g = self.groups[sent.request.group]
                try:
                    with g.lock.shared(LOCK_WAIT_S):
                        self._resend(proc, sent)
                except TimeoutError:
                    proc.unresolved.appendleft(sent)
                continue
            g = proc.rng.choice(list(self.groups.values()))
            try:
                with g.lock.shared(LOCK_WAIT_S):
                    self._agent_step(proc, g, g.agents[proc.name])
            except TimeoutError:
                continue

    def _agent_step(self, proc: _Process, g: GroupModel, a: AgentModel) -> None:
        c, roll = self.config, proc.rng.random()
        if roll < c.retry_probability:
            self._retry_something(proc, g)
        elif (roll := roll - c.retry_probability) < c.gc_probability:
            self._send(proc, ops.gc(self._rid(proc), g.name))
        elif (roll := roll - c.gc_probability) < c.what_if_probability:
            self._send(proc, ops.what_if(self._rid(proc), g.name, [a.agent]))
        elif roll - c.what_if_probability < c.read_probability:
            if proc.rng.random() < 0.5:
                self._read_group(proc, g)
            else:
                self._send(proc, ops.list_checkpoints(self._rid(proc), g.name))
        elif g.coordinated:
            if g.open_epoch and a.agent in g.members and g.open_epoch not in a.epochs_done:
                self._commit_epoch(proc, g, a, g.open_epoch)
        elif proc.rng.random() < 0.5:
            self._commit(proc, g, a)
        else:
            self._report(proc, g, a)

    def _commit(self, proc: _Process, g: GroupModel, a: AgentModel) -> None:
        forced = g.mode == "CIC_BCS" and proc.rng.random() < 0.25  # BCS forced checkpoints may jump indexes
        index = self._take_index(a, jump=proc.rng.randint(0, 2) if forced else 0)
        request = ops.commit(self._rid(proc), g.name, a.agent, a.incarnation, index, 0, pb.FORCED if forced else pb.BASIC)

        def done(o: Outcome) -> None:
            if o.ok:
                self._stored(a, index)
            else:
                self._resync(proc, g, a, o)
        self._send(proc, request, done)

    def _report(self, proc: _Process, g: GroupModel, a: AgentModel) -> None:
        senders = [b for b in g.agents.values() if b is not a and b.incarnation]
        if not senders:
            return
        deps = []
        for _ in range(proc.rng.randint(1, self.config.deps_per_report)):
            s = proc.rng.choice(senders)
            deps.append((s.agent, s.last_index + 1, a.agent, a.last_index + 1, f"m{self.run_id}-{next(self._ids)}"))
        request = ops.report_deps(self._rid(proc), g.name, a.agent, a.incarnation, deps)
        self._send(proc, request, lambda o: o.ok or self._resync(proc, g, a, o))

    def _commit_epoch(self, proc: _Process, g: GroupModel, a: AgentModel, epoch: int) -> None:
        index = self._take_index(a)
        request = ops.commit(self._rid(proc), g.name, a.agent, a.incarnation, index, epoch, pb.COORDINATED_CUT)

        def done(o: Outcome) -> None:
            if o.ok:
                self._stored(a, index)
                a.epochs_done.add(epoch)
                if o.response.stable_epoch >= epoch:
                    with self._mutex:
                        g.open_epoch, g.closed_epoch = 0, max(g.closed_epoch, epoch)
            elif o.refused("ALREADY_EXISTS") or o.refused("FAILED_PRECONDITION", *EPOCH_CLOSED):
                a.epochs_done.add(epoch)  # committed already, or the epoch closed: wait for the next
            else:
                self._resync(proc, g, a, o)
        self._send(proc, request, done)

    # ---- epochs, recoveries, zombies -------------------------------------------------
    def _epoch_loop(self, proc: _Process) -> None:
        coordinated = [g for g in self.groups.values() if g.coordinated]
        while coordinated and self._pause(self.config.epoch_poll_s):
            for g in coordinated:
                try:
                    with g.lock.shared(LOCK_WAIT_S):
                        if proc.rng.random() < self.config.retry_probability:
                            self._retry_something(proc, g)
                        elif g.open_epoch:
                            self._read_group(proc, g)
                        else:
                            self._send(proc, ops.start_epoch(self._rid(proc), g.name), lambda o, g=g: self._started(proc, g, o))
                except TimeoutError:
                    continue

    def _started(self, proc: _Process, g: GroupModel, outcome: Outcome) -> None:
        if outcome.ok:
            with self._mutex:
                g.open_epoch, g.members = outcome.response.epoch.epoch, frozenset(outcome.response.epoch.members)
        else:
            self._read_group(proc, g)

    def _recovery_loop(self, proc: _Process) -> None:
        while self._pause(self.config.recovery_period_s):
            g = proc.rng.choice(list(self.groups.values()))
            a = proc.rng.choice(list(g.agents.values()))
            try:
                with g.lock.exclusive(2 * LOCK_WAIT_S):
                    self._recover(proc, g, a)
            except TimeoutError:
                continue

    def _recover(self, proc: _Process, g: GroupModel, a: AgentModel) -> None:
        """`a` restarts: its re-registration declares the old incarnation failed."""
        self._read_group(proc, g)
        predicted = self._send(proc, ops.what_if(self._rid(proc), g.name, [a.agent]))
        request = ops.register(self._rid(proc), g.name, a.agent)
        outcome = self._send(proc, request, lambda o: self._registered(a, o), resolve=False)
        sent = _Sent(request, outcome.invoke.index, lambda o: self._registered(a, o))
        while outcome.type == INFO and sent.tries < MAX_TRIES and self._running():
            outcome = self._resend(proc, sent, final=True)
        if outcome.ok and proc.rng.random() < self.config.register_retry_probability:
            # Deliberately again: answered from the dedupe table, it must change nothing.
            self._resend(proc, sent, final=True)  # adopts a new incarnation only if it (wrongly) made one
        if g.coordinated:
            self._read_group(proc, g)  # the recovery aborted the open epoch
        # The what-if just before, on the same (locked) group, names who must roll back;
        # if it was wrong, the group stays RECOVERING and everyone is watched.
        rolled = [g.agents[t.agent_id] for t in predicted.response.targets] if predicted.ok else []
        self._settle_orders(proc, g, rolled or list(g.agents.values()))

    def _zombie_loop(self, proc: _Process) -> None:
        while self._pause(self.config.zombie_period_s):
            g = proc.rng.choice(list(self.groups.values()))
            try:
                with g.lock.shared(LOCK_WAIT_S):
                    self._zombie_write(proc, g)
            except TimeoutError:
                continue

    def _zombie_write(self, proc: _Process, g: GroupModel) -> None:
        """A write the coordinator must refuse: an old incarnation, or (coordinated) an
        epoch that is closed or has not started."""
        rng = proc.rng
        retired = [a for a in g.agents.values() if a.retired]
        if retired and (not g.coordinated or rng.random() < 0.5):
            a = rng.choice(retired)
            incarnation, epoch = rng.choice(a.retired), g.open_epoch
        elif g.coordinated:
            a = rng.choice(list(g.agents.values()))
            incarnation = a.incarnation
            epoch = g.closed_epoch if g.closed_epoch and rng.random() < 0.5 else max(g.open_epoch, g.closed_epoch) + 3
        else:
            return
        if g.coordinated or rng.random() < 0.5:
            kind = pb.COORDINATED_CUT if g.coordinated else pb.BASIC
            self._send(proc, ops.commit(self._rid(proc), g.name, a.agent, incarnation, self._take_index(a), epoch, kind),
                       resolve=False)
        else:
            others = [b.agent for b in g.agents.values() if b is not a]
            deps = [(rng.choice(others), 1, a.agent, a.last_index + 1, f"z{self.run_id}-{next(self._ids)}")]
            self._send(proc, ops.report_deps(self._rid(proc), g.name, a.agent, incarnation, deps), resolve=False)
