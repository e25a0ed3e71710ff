"""The metadata workload: concurrent checkpoint-metadata traffic against a cluster, as a history.

It needs nothing but a list of gRPC endpoints (proxied or not) and knows nothing
of faults: a nemesis runs beside it and records its own ops in the same history.
Processes (threads; each a Jepsen process with one open operation at a time and
its own leader-following Connection):

- agent processes "p0".."pN-1": each drives one agent in every group: checkpoint
  commits with rising indexes (for coordinated groups, one per open epoch), batches
  of dependency reports stamped with each sender's generation (each acknowledged
  one sometimes probed by a what-if that names a sender failed), reads (GetGroup,
  ListCheckpoints, WhatIf), occasional GarbageCollect, and deliberate re-sends of
  requests that already completed. While a fault is in force, half the calls get a
  short deadline, so unknown outcomes are common.
- "epochs": starts an epoch of each coordinated group once the last one closed.
- "recoverer": re-registers a live agent of each group in turn (which declares its
  previous incarnation failed and starts a recovery), then watches and acknowledges
  the rollback orders of the whole group.
- "zombie": writes with retired incarnations and with closed or unstarted epochs;
  every such write must be refused.
- "sampler": node samples (chaos.sampler).

A recovery holds its group's lock exclusively and every other operation on the
group holds it shared, so the state a recovery line is computed on is pinned down
by the history (up to operations whose outcome stayed unknown). An operation that
ends `info` is re-sent with the same request id (recorded with `retry_of`) until
it gets an answer or the run ends. Groups use long leases: no agent is declared
failed behind the history's back. What is recorded: chaos.workloads.metadata_ops;
how a request is sent and re-sent: chaos.workloads.metadata_processes; what the
workload believes about its groups: chaos.workloads.metadata_model.
"""
from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Sequence

from chaos.client import Outcome, RecordingClient
from chaos.history import CRASHED, INFO, History
from chaos.sampler import NodeSampler, await_convergence
from chaos.workloads import metadata_ops as ops
from chaos.workloads.metadata_model import AgentModel, Beliefs, GroupModel
from chaos.workloads.metadata_processes import MAX_TRIES, ClientProcess, RunBudget
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.authz import Role
from coordinator.harness.local_cluster import BINDINGS_FILE as HARNESS_BINDINGS_FILE
from coordinator.harness.local_cluster import TOKENS_FILE as HARNESS_TOKENS_FILE
from coordinator.harness.local_cluster import harness_access
from coordinator.transport.auth import add_binding, add_token

MODES = {"COORDINATED": pb.COORDINATED, "CIC_BCS": pb.CIC_BCS, "UNCOORDINATED": pb.UNCOORDINATED}
LOCK_WAIT_S = 0.5
DOWN_DEADLINE_S = 1.0  # each final read's, when too few node processes are left to elect a leader
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
    # The final reads' deadline: long, as the cluster may still be electing after the last heal.
    final_deadline_s: float = 10.0
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
    # After an acknowledged report, how often a what-if names one of its senders failed:
    # the line must then roll the receiver back, which checks that the record was stored.
    dependency_probe_probability: float = 0.3
    lease_ttl_s: float = 3600.0
    epoch_timeout_s: float = 120.0
    retention: int = 2
    seed: int = 0
    # While a fault is in force, this share of calls gets a deadline this short: most of
    # them end with an unknown outcome, to be settled by re-sending (0: never).
    hurried_share: float = 0.5
    hurried_deadline_s: float = 0.008  # below the usual latency of a call (about 10 ms)


class MetadataWorkload:
    def __init__(self, history: History, endpoints: Sequence[str], config: MetadataConfig = MetadataConfig()) -> None:
        self.history, self.endpoints, self.config = history, list(endpoints), config
        self.run_id = uuid.uuid4().hex[:6]
        names = [f"p{i}" for i in range(config.agent_processes)]
        self.groups = {
            name: GroupModel(name, mode, {a: AgentModel(name, a) for a in names})
            for mode in config.modes for name in [f"{config.prefix}-{self.run_id}-{mode.lower().replace('_', '')}"]}
        self.beliefs = Beliefs()
        self.budget = RunBudget(config.max_ops)
        self._ids = itertools.count(1)
        self._processes: list[ClientProcess] = []
        self.sampler = NodeSampler(history, self.endpoints, config.sample_period_s)
        # Identities without the right role, when the cluster is a local harness one.
        self.intruders = _intruder_tokens(self.endpoints, f"{config.prefix}-{self.run_id}")
        # Whether a fault is in force now; whoever injects faults sets it (the runner: the nemesis's).
        self.faults_in_force: Callable[[], bool] = lambda: False

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
            proc.until_ok(ops.create_group(self._rid(proc), spec), attempts)
            for a in g.agents.values():
                proc.until_ok(ops.register(self._rid(proc), g.name, a.agent), attempts,
                              lambda o, a=a: self._registered(a, o))

    def start(self) -> None:
        self.budget.start(self.config.duration_s)
        self.sampler.start()
        loops: list[tuple[str, Callable[[ClientProcess], None]]] = [
            (f"p{i}", self._agent_loop) for i in range(self.config.agent_processes)]
        loops += [("epochs", self._epoch_loop), ("recoverer", self._recovery_loop), ("zombie", self._zombie_loop)]
        loops += [(f"intruder-{role}", self._intruder_loop) for role in self.intruders]
        for name, loop in loops:
            proc = self._process(name, token=self.intruders.get(name.removeprefix("intruder-")))
            proc.thread = threading.Thread(target=self._guarded, args=(loop, proc), name=f"chaos-{name}", daemon=True)
            proc.thread.start()

    def _guarded(self, loop: Callable[[ClientProcess], None], proc: ClientProcess) -> None:
        try:
            loop(proc)
        except Exception as exc:  # recorded, so a dead process is visible in the history
            self.history.note(proc.name, CRASHED, {"error": f"{type(exc).__name__}: {exc}"})
            raise

    def wait(self) -> None:
        """Until the duration or the operation budget is used up (bounded)."""
        slack = 4 * self.config.deadline_s + 10
        for proc in self._processes:
            while proc.thread is not None and proc.thread.is_alive():
                left = self.budget.deadline + slack - time.monotonic()
                if left <= 0 and not self.budget.held:
                    break
                proc.thread.join(min(1.0, left) if left > 0 else 1.0)

    def stop(self) -> None:
        self.budget.stop()

    def finish(self, convergence_timeout: float = 30.0, nodes_running: Callable[[], int] | None = None) -> None:
        """After the faults healed: settle what is still unknown, read the final state,
        and wait for every node to hold the same content.

        `nodes_running()`: how many node processes run (default: all). With at most
        half of them (the rest refused their damaged stores at restart, as a planted
        skip-fsync power loss leaves them) no leader can be elected and nothing can
        answer: unknown outcomes are then not re-sent (they stay unknown, as after one
        more unanswered try), and the final reads are made and recorded with a deadline
        of DOWN_DEADLINE_S each instead of being waited out. With any node process gone
        the nodes cannot all converge, and the wait for that ends after one round."""
        size = len(self.endpoints)
        running = nodes_running or (lambda: size)
        self.stop()
        self.wait()
        down = running() <= size // 2
        for proc in self._processes:
            if not down and (proc.thread is None or not proc.thread.is_alive()):  # else it still has an op open
                proc.resolve_unknown()
        final = self._process("final", deadline=DOWN_DEADLINE_S if down else self.config.final_deadline_s)
        for g in self.groups.values():
            state = self._read_group(final, g)
            # Settle only a group the cluster answered for: with no leader (every node's
            # store lost, as a planted skip-fsync power loss leaves it) each watch and read
            # of the settling rounds would wait out its whole deadline, for nothing.
            if state.ok and state.response.group.state != pb.RUNNING:
                self._settle_orders(final, g, list(g.agents.values()), keep_going=lambda: True)
            final.send(ops.list_checkpoints(self._rid(final), g.name))
        self.sampler.stop()
        await_convergence(self.history, self.endpoints, convergence_timeout, possible=lambda: running() == size)
        for proc in self._processes:
            proc.close()

    # ---- processes ---------------------------------------------------------------
    def _process(self, name: str, deadline: float | None = None, token: str | None = None) -> ClientProcess:
        client = RecordingClient(self.history, name, self.endpoints, deadline=deadline or self.config.deadline_s,
                                 rpc_timeout=self.config.rpc_timeout_s, token=token)
        proc = ClientProcess(client, random.Random(f"{self.config.seed}-{name}"), self.budget)
        if self.config.hurried_share > 0 and deadline is None:
            # The same identity as the process's own client: an intruder's hurried call
            # made as the harness admin would be let through, and would write.
            proc.hurried = RecordingClient(self.history, name, self.endpoints,
                                           deadline=self.config.hurried_deadline_s,
                                           rpc_timeout=min(self.config.rpc_timeout_s, self.config.hurried_deadline_s),
                                           token=token)
            proc.hurry = lambda: self.faults_in_force() and proc.rng.random() < self.config.hurried_share
        self._processes.append(proc)
        return proc

    def _rid(self, proc: ClientProcess) -> str:
        return f"{self.run_id}-{proc.name}-{next(self._ids)}"

    # ---- the model and the group's state ----------------------------------------------
    def _registered(self, a: AgentModel, outcome: Outcome) -> None:
        if outcome.ok:
            self.beliefs.adopt_incarnation(a, outcome.response.incarnation, outcome.response.generation)

    def _refresh(self, g: GroupModel, outcome: Outcome) -> None:
        if outcome.ok:
            self.beliefs.refresh(g, outcome.response)

    def _read_group(self, proc: ClientProcess, g: GroupModel) -> Outcome:
        return proc.send(ops.get_group(self._rid(proc), g.name), lambda o: self._refresh(g, o))

    def _resync(self, proc: ClientProcess, g: GroupModel, a: AgentModel, outcome: Outcome) -> None:
        """A write was refused: catch up with the coordinator (rollback to obey, newer incarnation)."""
        if outcome.refused("FAILED_PRECONDITION", pb.REASON_ORDER_PENDING):
            self._settle_orders(proc, g, [a])
        elif outcome.refused("FAILED_PRECONDITION"):
            self._read_group(proc, g)

    def _settle_orders(self, proc: ClientProcess, g: GroupModel, agents: list[AgentModel], rounds: int = 3,
                       keep_going: Callable[[], bool] | None = None) -> bool:
        """Watch the agents' orders and acknowledge every rollback, until the group runs again.

        Only a GetGroup that shows the group RUNNING proves every rollback order was
        seen (an empty watch may just have been too short), so the loop checks that."""
        window = self.config.watch_window_s
        for _ in range(rounds):
            if not (keep_going or self.budget.running)():
                return False
            for a in agents:
                watched = proc.send(ops.watch_orders(self._rid(proc), g.name, a.agent, a.incarnation, window))
                for order in (watched.response if watched.ok else ()):
                    if order.WhichOneof("kind") == "roll_back":
                        back = order.roll_back
                        proc.send(ops.ack_order(self._rid(proc), g.name, a.agent, a.incarnation, order.order_id),
                                  lambda o, a=a, back=back: o.ok and self.beliefs.rolled_back(
                                      a, back.checkpoint_index, back.generation))
            state = self._read_group(proc, g)
            if state.ok and state.response.group.state == pb.RUNNING:
                return True
            agents, window = list(g.agents.values()), 2 * window
        return False

    # ---- agent processes -----------------------------------------------------------
    def _agent_loop(self, proc: ClientProcess) -> None:
        while self.budget.pause(self.config.think_s):
            if proc.unresolved:
                sent = proc.unresolved.popleft()
                g = self.groups[sent.request.group]
                try:
                    with g.lock.shared(LOCK_WAIT_S):
                        proc.resend(sent)
                except TimeoutError:
                    proc.unresolved.appendleft(sent)
                continue
            g = proc.rng.choice(list(self.groups.values()))
            try:
                with g.lock.shared(LOCK_WAIT_S):
                    self._agent_step(proc, g, g.agents[proc.name])
            except TimeoutError:
                continue

    def _agent_step(self, proc: ClientProcess, g: GroupModel, a: AgentModel) -> None:
        c, roll = self.config, proc.rng.random()
        if roll < c.retry_probability:
            proc.retry_something(g.name)
        elif (roll := roll - c.retry_probability) < c.gc_probability:
            proc.send(ops.gc(self._rid(proc), g.name))
        elif (roll := roll - c.gc_probability) < c.what_if_probability:
            proc.send(ops.what_if(self._rid(proc), g.name, [a.agent]))
        elif roll - c.what_if_probability < c.read_probability:
            if proc.rng.random() < 0.5:
                self._read_group(proc, g)
            else:
                proc.send(ops.list_checkpoints(self._rid(proc), g.name))
        elif g.coordinated:
            if g.open_epoch and a.agent in g.members and g.open_epoch not in a.epochs_done:
                self._commit_epoch(proc, g, a, g.open_epoch)
        elif proc.rng.random() < 0.5:
            self._commit(proc, g, a)
        else:
            self._report(proc, g, a)

    def _commit(self, proc: ClientProcess, g: GroupModel, a: AgentModel) -> None:
        forced = g.mode == "CIC_BCS" and proc.rng.random() < 0.25  # BCS forced checkpoints may jump indexes
        index = self.beliefs.take_index(a, jump=proc.rng.randint(0, 2) if forced else 0)
        request = ops.commit(self._rid(proc), g.name, a.agent, a.incarnation, index, 0, pb.FORCED if forced else pb.BASIC)

        def done(o: Outcome) -> None:
            if o.ok:
                self.beliefs.stored(a, index)
            else:
                self._resync(proc, g, a, o)
        proc.send(request, done)

    def _report(self, proc: ClientProcess, g: GroupModel, a: AgentModel) -> None:
        senders = [b for b in g.agents.values() if b is not a and b.incarnation]
        if not senders:
            return
        deps, generations = [], []
        for _ in range(proc.rng.randint(1, self.config.deps_per_report)):
            s = proc.rng.choice(senders)
            deps.append((s.agent, s.last_index + 1, a.agent, a.last_index + 1, f"m{self.run_id}-{next(self._ids)}"))
            generations.append(s.generation)
        request = ops.report_deps(self._rid(proc), g.name, a.agent, a.incarnation, deps, generations)
        outcome = proc.send(request, lambda o: o.ok or self._resync(proc, g, a, o))
        if outcome.ok and proc.rng.random() < self.config.dependency_probe_probability:
            proc.send(ops.what_if(self._rid(proc), g.name, [deps[0][0]]))

    def _commit_epoch(self, proc: ClientProcess, g: GroupModel, a: AgentModel, epoch: int) -> None:
        index = self.beliefs.take_index(a)
        request = ops.commit(self._rid(proc), g.name, a.agent, a.incarnation, index, epoch, pb.COORDINATED_CUT)

        def done(o: Outcome) -> None:
            if o.ok:
                self.beliefs.stored(a, index)
                a.epochs_done.add(epoch)
                if o.response.stable_epoch >= epoch:
                    self.beliefs.epoch_stable(g, epoch)
            elif o.refused("ALREADY_EXISTS") or o.refused("FAILED_PRECONDITION", *EPOCH_CLOSED):
                a.epochs_done.add(epoch)  # committed already, or the epoch closed: wait for the next
            else:
                self._resync(proc, g, a, o)
        proc.send(request, done)

    # ---- epochs, recoveries, zombies -------------------------------------------------
    def _epoch_loop(self, proc: ClientProcess) -> None:
        coordinated = [g for g in self.groups.values() if g.coordinated]
        while coordinated and self.budget.pause(self.config.epoch_poll_s):
            for g in coordinated:
                try:
                    with g.lock.shared(LOCK_WAIT_S):
                        if proc.rng.random() < self.config.retry_probability:
                            proc.retry_something(g.name)
                        elif g.open_epoch:
                            self._read_group(proc, g)
                        else:
                            proc.send(ops.start_epoch(self._rid(proc), g.name),
                                      lambda o, g=g: self._started(proc, g, o))
                except TimeoutError:
                    continue

    def _started(self, proc: ClientProcess, g: GroupModel, outcome: Outcome) -> None:
        if outcome.ok:
            self.beliefs.epoch_started(g, outcome.response.epoch)
        else:
            self._read_group(proc, g)

    def _recovery_loop(self, proc: ClientProcess) -> None:
        """The groups in turn, a random agent of each: a run of a few recoveries still
        recovers every mode, each rolling back one agent or several."""
        turn = itertools.cycle(list(self.groups.values()))
        g = next(turn)
        while self.budget.pause(self.config.recovery_period_s):
            a = proc.rng.choice(list(g.agents.values()))
            try:
                with g.lock.exclusive(2 * LOCK_WAIT_S):
                    self._recover(proc, g, a)
            except TimeoutError:
                continue  # the same group next time
            g = next(turn)

    def _recover(self, proc: ClientProcess, g: GroupModel, a: AgentModel) -> None:
        """`a` restarts: its re-registration declares the old incarnation failed."""
        self._read_group(proc, g)
        predicted = proc.send(ops.what_if(self._rid(proc), g.name, [a.agent]))
        request = ops.register(self._rid(proc), g.name, a.agent)
        outcome, sent = proc.send_until(request, lambda o: self._registered(a, o), tries=MAX_TRIES,
                                        again=lambda o: o.type == INFO and self.budget.running())
        if outcome.ok and proc.rng.random() < self.config.register_retry_probability:
            # Deliberately again: answered from the dedupe table, it must change nothing.
            proc.resend(sent, final=True)  # adopts a new incarnation only if it (wrongly) made one
        if g.coordinated:
            self._read_group(proc, g)  # the recovery aborted the open epoch
        # The what-if just before, on the same (locked) group, names who must roll back;
        # if it was wrong, the group stays RECOVERING and everyone is watched.
        rolled = [g.agents[t.agent_id] for t in predicted.response.targets] if predicted.ok else []
        self._settle_orders(proc, g, rolled or list(g.agents.values()))

    def _intruder_loop(self, proc: ClientProcess) -> None:
        """Writes the caller's role does not allow: an agent identity bound to another
        group acting for this group's agents and administering it, and an observer
        writing. Each must be refused (invariant unauthorized-writes-refused)."""
        identity = proc.name.removeprefix("intruder-")
        while self.budget.pause(self.config.zombie_period_s):
            g = proc.rng.choice(list(self.groups.values()))
            a = proc.rng.choice(list(g.agents.values()))
            rid = self._rid(proc)
            attempts = [
                ("AgentService", "Register", pb.RegisterRequest(request_id=rid, group=g.name, agent_id=a.agent,
                                                                secret=ops.SECRET)),
                ("AgentService", "Deregister", pb.DeregisterRequest(
                    request_id=rid, group=g.name, agent_id=a.agent,
                    token=pb.FencingToken(incarnation=a.incarnation, secret=ops.SECRET))),
                ("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id=rid, group=g.name)),
                ("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=rid, spec=pb.GroupSpec(
                    group=f"{g.name}-intruded", mode=pb.CIC_BCS))),
            ]
            service, method, message = proc.rng.choice(attempts)
            proc.send(ops.intrude(rid, identity, service, method, message, g.name), resolve=False)

    def _zombie_loop(self, proc: ClientProcess) -> None:
        while self.budget.pause(self.config.zombie_period_s):
            g = proc.rng.choice(list(self.groups.values()))
            try:
                with g.lock.shared(LOCK_WAIT_S):
                    self._zombie_write(proc, g)
            except TimeoutError:
                continue

    def _zombie_write(self, proc: ClientProcess, g: GroupModel) -> None:
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
            index = self.beliefs.take_index(a)
            proc.send(ops.commit(self._rid(proc), g.name, a.agent, incarnation, index, epoch, kind), resolve=False)
        else:
            others = [b.agent for b in g.agents.values() if b is not a]
            deps = [(rng.choice(others), 1, a.agent, a.last_index + 1, f"z{self.run_id}-{next(self._ids)}")]
            proc.send(ops.report_deps(self._rid(proc), g.name, a.agent, incarnation, deps), resolve=False)


def _intruder_tokens(endpoints: Sequence[str], home_group: str) -> dict[str, str]:
    """Tokens of an agent identity bound to another group (`home_group`) and of an
    observer, added to the harness cluster's tokens and bindings files (re-read by the
    nodes); none for a cluster this process did not start."""
    access = harness_access(endpoints)
    if access is None:
        return {}
    directory = access[1].parent
    tokens: dict[str, str] = {}
    for role, (group, pattern) in {Role.AGENT: (home_group, "own-*"), Role.OBSERVER: ("", "")}.items():
        identity = f"{home_group}-{role.value}"
        tokens[role.value] = add_token(directory / HARNESS_TOKENS_FILE, identity)
        add_binding(directory / HARNESS_BINDINGS_FILE, identity, role, group, pattern)
    return tokens
