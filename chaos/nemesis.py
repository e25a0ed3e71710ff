"""The nemesis: carries out a scenario's fault plan against a running ChaosCluster.

It runs in its own thread beside the workloads. Each fault is applied at its
planned time, to a target resolved at that moment (who leads *now*), held, and
healed; every step is recorded in the history as a nemesis op, including faults
skipped because their target could not be found (no leader during an election),
so the report says what really happened. `stop()` heals whatever is still in force,
so a run never ends with a node paused, cut off or out of disk.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from chaos import bitrot, boot_skew, repair
from chaos import scenarios as s
from chaos.config_typo import ConfigTypo
from chaos.controller import ChaosCluster
from chaos.history import History
from chaos.invariants.damage import BIT_ROT_DONE, BIT_ROT_OUTCOME, REFUSED, RUNNING
from chaos.linkfaults import Partition
from coordinator.replication.rebuild import prepare_rebuild
from coordinator.storage.protocol import EXIT_DAMAGED

log = logging.getLogger(__name__)
LEADER_WAIT_S = 10.0
NODE_BACK_S = 30.0


class AgentFaults(Protocol):
    """What the nemesis needs of the agent workload for AGENT_CRASH and GROUP_RESTORE."""

    def crash(self, count: int, rng: random.Random) -> list[str]: ...
    def restart_crashed(self) -> list[str]: ...
    def take_savepoints(self) -> list[str]: ...
    def restore_savepoints(self) -> list[str]: ...


@dataclass
class Injected:
    """What was done, for the report: counts by kind, and what could not be done."""

    by_kind: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


class Nemesis:
    def __init__(self, cluster: ChaosCluster, history: History, plan: list[s.Fault], *, seed: int,
                 agents: AgentFaults | None = None, on_plan_done: Callable[[], None] | None = None) -> None:
        """`on_plan_done` runs once the plan's last fault is healed (or the plan ended early)."""
        self.cluster, self.history, self.plan, self.agents = cluster, history, plan, agents
        self.on_plan_done = on_plan_done
        self.rng = random.Random(f"nemesis-{seed}")
        self.injected = Injected()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._heal: tuple[str, Callable[[], None]] | None = None  # the fault in force and how to end it
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    @property
    def in_force(self) -> bool:
        """Whether a fault is in force now (between its injection and its heal)."""
        return self._heal is not None

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> "Nemesis":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> Injected:
        """Stop injecting and heal what is in force; returns what was injected."""
        self._stop.set()
        self._thread.join(timeout)
        self._heal_current()
        return self.injected

    def _run(self) -> None:
        try:
            for fault in self.plan:
                if self._stop.wait(max(0.0, self._t0 + fault.at - time.monotonic())):
                    return
                self._apply(fault)
                if self._stop.wait(max(0.0, self._t0 + fault.heal_at - time.monotonic())):
                    return
                self._heal_current()
        except BaseException as exc:  # reported by the runner: a nemesis that broke is a failed run
            log.exception("nemesis failed")
            self.error = exc
        finally:
            if self.on_plan_done is not None:
                self.on_plan_done()

    # ---- faults ---------------------------------------------------------------------
    def _apply(self, fault: s.Fault) -> None:
        if fault.kind in s.AGENT_FAULTS:
            self._agent_fault(fault)
            return
        target = self._resolve(fault.target)
        if target is None:
            self.injected.skipped.append(f"{fault.kind} at {fault.at}s: no {fault.target} found")
            self.history.nemesis("skipped", {"kind": fault.kind, "target": fault.target})
            return
        apply, heal = self._actions(fault, target)
        apply()
        self.history.fault(fault.kind, target=fault.target, node=target, planned_at=fault.at)
        with self._lock:
            self._heal = (fault.kind, heal)
        self.injected.by_kind[fault.kind] = self.injected.by_kind.get(fault.kind, 0) + 1

    def _actions(self, fault: s.Fault, i: int | list[int]) -> tuple[Callable[[], None], Callable[[], None]]:
        c = self.cluster
        others = [j for j in range(c.size) if j != i]
        match fault.kind:
            case s.KILL:
                return lambda: c.kill(i), lambda: self._restart_if_down([i])
            case s.PAUSE:
                return lambda: c.pause(i), lambda: c.resume(i)
            case s.PARTITION:
                # Silent, connections kept open: a pulled cable rather than a refused port.
                return lambda: c.network.partition([[i]], Partition.BLACKHOLE), c.network.heal
            case s.DEAF:
                return lambda: c.network.deafen(i), c.network.heal
            case s.FLAKY:
                p = float(fault.params.get("probability", 1.0))
                return lambda: [c.network.flaky(i, j, p) for j in others], c.network.heal
            case s.DELAY:
                ms = float(fault.params.get("delay_ms", 100.0))
                return lambda: [c.network.delay(i, j, ms, ms / 4) for j in others], c.network.heal
            case s.RESTART:
                return lambda: self._rolling_restart(i), _nothing
            case s.DISK_FULL:
                return lambda: c.disks.fill(i, 0), lambda: (c.disks.unfill(i), self._restart_if_down([i]))
            case s.SLOW_DISK:
                return lambda: c.disks.slow(i), lambda: c.disks.fast(i)
            case s.POWER_LOSS:
                every = list(range(c.size))
                return lambda: c.power_cut(*every), lambda: c.power_on(*every)
            case s.CLOCK_JUMP:
                seconds = float(fault.params.get("seconds", 3600.0))
                return lambda: c.step_clock(i, seconds), lambda: c.step_clock(i, 0.0)
            case s.BIT_ROT:
                return lambda: self._rot(i, str(fault.params.get("file", bitrot.JOURNAL))), \
                    lambda: self._after_rot(i)
            case s.BOOT_SKEW:
                skewed = boot_skew.BootSkewFault(c, self.history, i, self._stop)
                return skewed.inject, skewed.heal
            case s.CONFIG_TYPO:  # the files every node reads: `i` (all nodes) names no file
                typo = ConfigTypo(*c.auth_files())
                return typo.inject, typo.heal
            case s.REPAIR:  # i leads; the rest of the roles drawn now (chaos.repair)
                rebuild = repair.RepairFault(c, self.history, repair.roles(i, c.size, self.rng), self._stop)
                return rebuild.inject, rebuild.heal
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _resolve(self, target: str) -> int | list[int] | None:
        c = self.cluster
        live = [n.index for n in c.nodes if n.alive and n.index not in c.paused]
        if target == s.ALL:
            return list(range(c.size))
        if target.startswith("node:"):
            return int(target.split(":", 1)[1])
        if target == s.ANY:
            return self.rng.choice(live) if live else None
        try:
            leader = c.leader(timeout=LEADER_WAIT_S)
        except TimeoutError:
            return None
        if target == s.LEADER:
            return leader
        followers = [i for i in live if i != leader]
        return self.rng.choice(followers) if followers else None

    def _agent_fault(self, fault: s.Fault) -> None:
        """Agents crashed (restarted when healed), or savepoints taken (restored to when healed)."""
        if self.agents is None:
            self.injected.skipped.append(f"{fault.kind} at {fault.at}s: no agent workload")
            return
        if fault.kind == s.AGENT_CRASH:
            crashed = self.agents.crash(int(fault.params.get("count", 1)), self.rng)
            self.history.fault(s.AGENT_CRASH, agents=crashed)
            heal, count = self._restart_agents, len(crashed)
        else:
            self.history.fault(s.GROUP_RESTORE, savepoints=self.agents.take_savepoints())
            heal, count = self._restore_groups, 1
        with self._lock:
            self._heal = (fault.kind, heal)
        self.injected.by_kind[fault.kind] = self.injected.by_kind.get(fault.kind, 0) + count

    def _restart_agents(self) -> None:
        assert self.agents is not None
        self.agents.restart_crashed()

    def _restore_groups(self) -> None:
        assert self.agents is not None
        self.history.nemesis("restored", {"groups": self.agents.restore_savepoints()})

    # ---- healing --------------------------------------------------------------------
    def _heal_current(self) -> None:
        with self._lock:
            current, self._heal = self._heal, None
        if current is None:
            return
        kind, heal = current
        heal()
        self.history.heal(kind)

    def _restart_if_down(self, indexes: list[int]) -> None:
        for i in indexes:
            if not self.cluster.nodes[i].alive:
                self.cluster.start(i)

    def _rot(self, i: int, what: str) -> None:
        """Stop the node cleanly (it stores its commit index), damage a file, start it again."""
        self.cluster.stop(i)
        done = bitrot.flip(self.cluster.nodes[i].data_dir, what, self.rng)
        self.history.nemesis(BIT_ROT_DONE, {"node": i, "file": what, "flipped": done})
        self.cluster.start(i)

    def _after_rot(self, i: int) -> None:
        """Judge how the damaged node took it (chaos.invariants.damage), then rebuild it if it refused.

        Judged once it has either ended or answered: a start takes seconds (the store is read through)."""
        process = self.cluster.nodes[i].process
        end = time.monotonic() + NODE_BACK_S
        while (process is not None and process.poll() is None and i not in self.cluster.statuses()
               and time.monotonic() < end):
            time.sleep(0.1)
        code = None if process is None else process.poll()
        outcome = {None: RUNNING, EXIT_DAMAGED: REFUSED}.get(code, f"exited with {code}")
        self.history.nemesis(BIT_ROT_OUTCOME, {"node": i, "outcome": outcome})
        if code is not None:
            prepare_rebuild(self.cluster.nodes[i].data_dir)
            self.cluster.start(i)

    def _rolling_restart(self, i: int) -> None:
        """A graceful stop and start; the next node only once this one answers again."""
        self.cluster.restart(i, crash=False)
        end = time.monotonic() + NODE_BACK_S
        while i not in self.cluster.statuses() and time.monotonic() < end and not self._stop.wait(0.1):
            pass


def _nothing() -> None:
    pass
