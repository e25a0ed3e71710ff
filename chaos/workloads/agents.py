"""The agent workload: token-passing agent processes under chaos, checked against the truth.

One group per mode it is given (coordinated with epochs; CIC: BCS, HMNR, FDAS), a
few real agent processes each (chaos.tokens.agent, linked to the real
AgentClient) talking to the cluster's endpoints -- the proxied ones under a
ChaosCluster, so partitions and leader kills reach them. Per group a driver thread
(chaos.workloads.agent_group) plays the network with chaos.tokens.traffic, the
driver `raftpoint demo` uses too: messages are duplicated, held in flight a while and
delivered out of order.

The nemesis crashes agents through crash() and restart_crashed() (chaos.nemesis's
AgentFaults): a plain SIGKILL, a crash between blob write and metadata commit, after
the commit before the answer, in the middle of a rollback, or a zombie whose
replacement registers while it keeps writing. The kinds are used in turn, so every
kind occurs in a run with enough crashes. The nemesis also plays an operator through
take_savepoints() and restore_savepoints(): a savepoint of each group, and later
the whole group restored to it. An agent operation that fails because the
coordinator is unreachable is recorded as `info` and left for later: the message
stays in flight, the checkpoint is taken at another time.

History: every driver operation is an op of process "agents-<mode>" (send, deliver,
checkpoint, restart, audit), the crashes of "agents-<mode>-faults", admin calls of
"agents-<mode>-admin", zombie writes of "agents-<mode>-zombie"; notes record what the
agents' journals say (recovery lines, re-deliveries, acknowledged checkpoints). None
carries a request id, so the metadata invariants leave these groups alone.

finish() returns the workload's invariants as InvariantResults for chaos.checker's
`extra`, judged by each group's ledger (chaos.tokens.ledger): tokens conserved
at every audit (after each recovery, once the group is RUNNING, and at the end), no
orphan, every lost message re-delivered exactly once, no duplicate delivered twice,
zombie writes refused, every acknowledged checkpoint still listed and readable with
its digest unless a recovery rolled its agent below it or garbage collection took it,
each restore back at exactly its savepoint, a consistent cut holding every token;
and "agent-workload", whose counts say what happened (and which fails if a group
made no progress or could not be settled and audited at the end).
"""
from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from chaos.tokens import invariants as judged
from chaos.tokens.invariants import CHECKPOINTS, WORKLOAD, ZOMBIES
from chaos.tokens.traffic import MODES, Traffic
from chaos.history import History
from chaos.report import InvariantResult
from chaos.workloads.agent_crashes import CRASH_KINDS
from chaos.workloads.agent_group import PLANTS, GroupConfig, GroupDriver

CHAOS_TRAFFIC = Traffic(hold_probability=0.2, hold_s=(0.2, 1.5))


@dataclass(frozen=True)
class AgentConfig:
    modes: tuple[str, ...] = ("coordinated", "bcs")  # of chaos.tokens.traffic.MODES
    agents: int = 3  # per group
    tokens: int = 100  # each agent's at the start
    duration_s: float = 20.0
    max_rounds: int = 5000  # per group
    round_pause_s: float = 0.05
    traffic: Traffic = field(default=CHAOS_TRAFFIC)
    crash_kinds: tuple[str, ...] = CRASH_KINDS
    # Long leases: only crashes end an incarnation, not a partition that delays heartbeats.
    lease_ttl_s: float = 60.0
    retention: int = 2
    # An agent's coordinator call, retries included: an outage longer than this turns
    # the operation into `info` (its reply must come within AgentProcess's 30 s).
    agent_deadline_s: float = 5.0
    admin_deadline_s: float = 5.0
    recovery_timeout_s: float = 30.0  # to settle at the end
    audit_every_s: float = 3.0
    gc_every_s: float = 6.0
    fault_timeout_s: float = 20.0  # crash()/restart_crashed() wait this long for a group's driver
    seed: int = 0
    prefix: str = "ag"  # group names: <prefix>-<run>-<mode>
    plant: str | None = None  # a planted driver fault (agent_group.PLANTS), to prove the checks
    blob_store: str | None = None  # e.g. an s3:// URL (chaos.blob_outage); None: a directory per group

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ValueError(f"modes must be some of {sorted(MODES)}, not {list(self.modes)}")
        if not 2 <= self.agents <= 16:
            raise ValueError("agents must be 2..16 per group")
        if set(self.crash_kinds) - set(CRASH_KINDS) or not self.crash_kinds:
            raise ValueError(f"crash_kinds must be some of {CRASH_KINDS}")
        if self.plant is not None and self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {PLANTS}")


class AgentWorkload:
    def __init__(self, history: History, endpoints: Sequence[str], root: Path,
                 config: AgentConfig = AgentConfig()) -> None:
        """`root`: where agents keep blobs, delivery logs and their own logs."""
        self.history, self.config = history, config
        self.run_id = uuid.uuid4().hex[:6]
        c = config
        group_config = GroupConfig(c.agents, c.tokens, c.traffic, c.lease_ttl_s, c.retention, c.agent_deadline_s,
                                   c.admin_deadline_s, c.recovery_timeout_s, c.audit_every_s, c.gc_every_s,
                                   c.round_pause_s, c.max_rounds, c.plant, c.seed, c.blob_store)
        self.groups = [GroupDriver(history, endpoints, Path(root), mode, f"{c.prefix}-{self.run_id}-{mode}",
                                   group_config) for mode in c.modes]
        self._kinds = itertools.cycle(c.crash_kinds)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._set_up = False
        self._results: list[InvariantResult] | None = None
        self.problems: list[str] = []

    # ---- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the groups and start their agents (start() does it if not done)."""
        if not self._set_up:
            try:
                with ThreadPoolExecutor(len(self.groups)) as pool:  # agent processes start in parallel
                    list(pool.map(GroupDriver.setup, self.groups))
            except BaseException:
                self.close()
                raise
            self._set_up = True

    def start(self) -> "AgentWorkload":
        self.setup()
        deadline = time.monotonic() + self.config.duration_s
        for g in self.groups:
            thread = threading.Thread(target=self._guarded, args=(g, deadline), name=f"chaos-{g.process}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _guarded(self, g: GroupDriver, deadline: float) -> None:
        try:
            g.run(deadline, self._stop)
        except Exception as exc:  # a harness bug: recorded, and the run fails on it
            self.problems.append(f"{g.process} driver died: {type(exc).__name__}: {exc}")
            self.history.note(g.process, "crashed", {"error": f"{type(exc).__name__}: {exc}"})

    def wait(self) -> None:
        """Until the duration or the round budget is used up (bounded)."""
        end = time.monotonic() + self.config.duration_s + 60
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def finish(self) -> list[InvariantResult]:
        """Stop, restart whatever is down, settle and audit every group, check the
        checkpoints, stop the agents; the invariants (computed once)."""
        if self._results is not None:
            return self._results
        self.stop()
        for thread in self._threads:
            thread.join(self.config.recovery_timeout_s + 30)
            if thread.is_alive():
                self.problems.append(f"{thread.name} did not stop")
        try:
            for g in self.groups:
                if g.lock.acquire(timeout=self.config.fault_timeout_s):
                    try:
                        g.settle()
                    finally:
                        g.lock.release()
                else:
                    self.problems.append(f"{g.name}: its driver never let go")
        finally:
            for g in self.groups:
                g.stop_agents()
        for g in self.groups:
            g.check_checkpoints()
            g.calls.close()
        self._results = self._judge()
        return self._results

    def close(self) -> None:
        """Stop everything without judging (an aborted run)."""
        self.stop()
        for g in self.groups:
            g.stop_agents()
            g.calls.close()

    # ---- the nemesis's AgentFaults ------------------------------------------------------------
    def crash(self, count: int, rng: random.Random) -> list[str]:
        """SIGKILL `count` agents (the next kinds in turn); returns "group/agent:kind"."""
        candidates = [(g, a) for g in self.groups for a in g.crashable()]
        crashed: list[str] = []
        for g, a in rng.sample(candidates, min(count, len(candidates))):
            kind = next(self._kinds)
            if not g.lock.acquire(timeout=self.config.fault_timeout_s):
                self.history.note(f"{g.process}-faults", "fault-skipped", {"agent": a, "kind": kind})
                continue
            try:
                crashed += g.crash(a, kind)
            finally:
                g.lock.release()
        return crashed

    def restart_crashed(self) -> list[str]:
        """Restart every agent crash() left down; each re-registers and recovers."""
        restarted: list[str] = []
        for g in self.groups:
            if g.lock.acquire(timeout=self.config.fault_timeout_s):
                try:
                    restarted += g.restart_held()
                finally:
                    g.lock.release()
        return restarted

    def take_savepoints(self) -> list[str]:
        """An operator's savepoint of every group (the fault of a group-restore); "group/savepoint"."""
        return self._each_group(GroupDriver.take_savepoint)

    def restore_savepoints(self) -> list[str]:
        """Every group restored to the savepoint take_savepoints() took (its heal)."""
        return self._each_group(GroupDriver.restore_savepoint)

    def _each_group(self, action: Callable[[GroupDriver], list[str]]) -> list[str]:
        done: list[str] = []
        for g in self.groups:
            if g.lock.acquire(timeout=self.config.fault_timeout_s):
                try:
                    done += action(g)
                finally:
                    g.lock.release()
        return done

    def progress(self, timeout: float = 10.0) -> dict[str, int]:
        """While it runs: the ledgers' counts so far (what the run has exercised: lost
        messages, undone sends, recoveries...) and the drivers' statistics."""
        out: Counter[str] = Counter()
        for g in self.groups:
            if g.lock.acquire(timeout=timeout):
                try:
                    g.world.ingest()
                    out.update(g.ledger.verdict().counts)
                    out.update(g.world.stats)
                finally:
                    g.lock.release()
        return dict(out)

    # ---- the verdict -----------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, object]:
        """What happened, for the report."""
        stats: Counter[str] = Counter()
        crashes: Counter[str] = Counter()
        fallbacks: Counter[str] = Counter()
        for g in self.groups:
            stats.update(g.world.stats)
            crashes.update(g.crashes.by_kind)
            fallbacks.update(g.crashes.fallbacks)
        recovery = [s for g in self.groups for s in g.recovery_s]
        return {"groups": len(self.groups), "messages": stats["sent"], "deliveries": stats["delivered"],
                "duplicates_sent": stats["duplicates_sent"], "duplicates_dropped": stats["duplicates_dropped"],
                "orphans_refused": stats["orphans_refused"], "redeliveries": stats["redelivered"],
                "forced_checkpoints": stats["forced"], "basic_checkpoints": stats["basic"],
                "acknowledged_checkpoints": stats["commits"], "planted_faults": stats["planted"],
                "recoveries": sum(len(g.ledger.lines) for g in self.groups),
                "restores": sum(len(g.ledger.restores) for g in self.groups),
                "crashes": dict(crashes), "crash_fallbacks": dict(fallbacks),
                "restart_to_running_s_max": max(recovery, default=0.0)}

    def _judge(self) -> list[InvariantResult]:
        """Record what the history lacks (what the network still holds, what was observed
        outside the coordinator), then judge from the history, as `python -m chaos.checker`
        does."""
        for g in self.groups:
            self.history.note(g.ledger_process, judged.FINAL, {
                "group": g.name, "network": g.world.network.carrying(), "final_audit": g.final_audit,
                "problems": g.problems})
        zombie = InvariantResult(ZOMBIES, True)
        checkpoints = InvariantResult(CHECKPOINTS, True)
        zc: Counter[str] = Counter()
        cc: Counter[str] = Counter()
        for g in self.groups:
            zc.update(g.crashes.zombie)
            cc.update(g.checkpoints.counts)
        zombie.counts, checkpoints.counts = dict(zc), dict(cc)
        workload = InvariantResult(WORKLOAD, True, self.counts)
        problems = self.problems + [p for g in self.groups for p in g.problems]
        problems += [f"{g.name}: no message was delivered" for g in self.groups if not g.world.stats["delivered"]]
        for result, findings in ((zombie, [f.why for g in self.groups for f in g.crashes.zombie_findings]),
                                 (checkpoints, [f.why for g in self.groups for f in g.checkpoints.findings]),
                                 (workload, problems)):
            self.history.note("agents-results", judged.RESULT, judged.recorded_result(result, findings))
        return judged.results(self.history.ops)
