"""One chaos run: a proxied cluster, the workloads, the nemesis, then the checker.

The order matters for what the report can claim. The workloads start before the
first fault and keep going through the whole plan; the nemesis heals everything
before the workloads settle their unknown outcomes and read the final state; only
then does the checker read the history. The history is streamed to disk as it
grows, so a run that dies midway still leaves its evidence, and
`python -m chaos.checker <history>` can check it again later.
"""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from chaos.checker import check
from chaos.controller import ChaosCluster
from chaos.history import History, load
from chaos.invariants import availability
from chaos.nemesis import Injected, Nemesis
from chaos.report import Report
from chaos.scenarios import SCENARIOS, Scenario, uses_disks
from chaos.workloads.metadata import MetadataConfig, MetadataWorkload
from coordinator import channels

log = logging.getLogger(__name__)
# Production election settings (coordinator/config.py defaults), but compaction often
# enough that snapshots are written and installed while faults are in force, and the
# digest audit often enough that a replica that diverged (or a false alarm) shows.
NODE_SETTINGS: dict[str, object] = {"compaction_min_entries": 2000, "compaction_min_time": 5.0,
                                    "digest_audit_s": 2.0}
DISK_MB = 96
# The workloads go on this long after the plan's last heal, so the history shows
# whether (and how soon) the cluster served again.
TAIL_S = 4.0
# Budgets that bound the load in count as well as time, sized well above what 2 cores
# reach (about 130 metadata operations and 20 agent rounds a second), so that the
# duration is what ends a run.
OPS_PER_S, ROUNDS_PER_S = 500, 40
LEADER_TIMEOUT_S = 30.0
HISTORY_FILE, REPORT_FILE = "history.jsonl", "report.json"


class CannotRun(Exception):
    """The scenario needs something this machine lacks (e.g. loop devices for disk faults)."""


@dataclass(frozen=True)
class RunConfig:
    scenario: str
    duration_s: float = 30.0
    seed: int = 1
    nodes: int = 3
    out_dir: Path = Path("chaos-run")
    bug: str | None = None  # a chaos.planted bug in every node: the checker must catch it
    serve_bound_s: float = availability.DEFAULT_BOUND_S
    keep_data: bool = False
    flood_agents: int | None = None  # the flood's size, for scenarios with one (None: the scenario's)


@dataclass
class RunResult:
    config: RunConfig
    report: Report
    injected: Injected
    history: Path
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.notes


def disk_factory(root: Path) -> Callable[[int], object]:
    """Node i's data on its own small ext4 loop device under root (inside a private
    mount namespace, which `raftpoint chaos run` enters by itself)."""
    from chaos.disk import LoopDisk, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise CannotRun(f"disk faults unavailable here: {reason}")
    return lambda i: LoopDisk(root / f"node{i}.img", root / f"node{i}", DISK_MB)


def _say(text: str) -> None:
    print(text, flush=True)


def run(config: RunConfig, on_progress: Callable[[str], None] = _say) -> RunResult:
    scenario: Scenario = SCENARIOS[config.scenario]
    plan = scenario.faults(config.seed, config.duration_s, config.nodes)
    out = Path(config.out_dir)
    for stale in ("cluster", "disks", "agents", "flood"):  # a kept earlier run's data would be a different cluster
        shutil.rmtree(out / stale, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    history_path = out / HISTORY_FILE
    history_path.unlink(missing_ok=True)
    disks = disk_factory(out / "disks") if uses_disks(plan) else None
    started = time.monotonic()
    notes: list[str] = []
    on_progress(f"scenario {scenario.name} (seed {config.seed}, {config.duration_s:.0f}s): {scenario.description}; "
                f"{len(plan)} faults planned" + (f"; planted bug: {config.bug}" if config.bug else ""))
    with History(history_path) as history, ChaosCluster(
            out / "cluster", config.nodes, settings=NODE_SETTINGS, seed=config.seed, history=history,
            bug=config.bug, disks=disks) as cluster, contextlib.ExitStack() as stack:
        cluster.start_all()
        # Every client of the run (the workloads' connections, the sampler, the agent
        # processes) finds the cluster's CA and a client certificate the way an agent
        # deployment does: in the RAFTPOINT_* variables.
        stack.enter_context(channels.environment(cluster.local.client_tls()))
        cluster.leader(LEADER_TIMEOUT_S)
        metadata = MetadataWorkload(history, cluster.endpoints(),
                                    MetadataConfig(duration_s=config.duration_s + TAIL_S, seed=config.seed,
                                                   max_ops=int(OPS_PER_S * (config.duration_s + TAIL_S))))
        agents = _agent_workload(scenario, history, cluster, config, out)
        flood = _flood_workload(scenario, history, cluster, config, out)
        extra = None
        try:
            metadata.setup()
            if agents is not None:
                agents.setup()
            if flood is not None:
                flood.start()
            metadata.start()
            if agents is not None:
                agents.start()
            # The metadata load runs until TAIL_S after the nemesis's real last heal, so the
            # history can show the cluster serving again even when a heal came late.
            metadata.budget.hold()
            nemesis = Nemesis(cluster, history, plan, seed=config.seed, agents=agents,
                              on_plan_done=lambda: metadata.budget.release(TAIL_S)).start()
            metadata.faults_in_force = lambda: nemesis.in_force
            loaded_from = time.monotonic()
            try:
                if agents is not None:
                    agents.wait()
                metadata.wait()
            finally:
                metadata.budget.release(0.0)
                injected = nemesis.stop()
            if plan and time.monotonic() - loaded_from < plan[-1].heal_at:
                notes.append(f"the load stopped {time.monotonic() - loaded_from:.1f}s in, before the plan's last "
                             f"heal at {plan[-1].heal_at:.1f}s: its budget is too small for this duration")
            if nemesis.error is not None:
                notes.append(f"the nemesis failed: {type(nemesis.error).__name__}: {nemesis.error}")
            on_progress(f"faults injected: {injected.by_kind or 'none'}; healed; settling and reading the final state")
            metadata.finish(nodes_running=cluster.running)
            if flood is not None:
                notes.extend(flood.wait())  # its evidence is in the history; its harness problems here
            extra = agents.finish() if agents is not None else []  # its harness problems are in there
        finally:
            if agents is not None and extra is None:  # an aborted run: stop the agent processes
                agents.close()
            if flood is not None:
                flood.close()
    report = check(load(history_path), extra=extra, serve_bound_s=config.serve_bound_s)
    report.summary.update(scenario=scenario.name, seed=config.seed, faults_by_kind=injected.by_kind,
                          faults_skipped=len(injected.skipped), bug=config.bug or "")
    result = RunResult(config, report, injected, history_path, time.monotonic() - started, notes)
    (out / REPORT_FILE).write_text(json.dumps({**report.to_dict(), "notes": notes, "seconds": result.seconds,
                                               "skipped_faults": injected.skipped}, indent=1, default=str))
    if not config.keep_data and result.ok:
        shutil.rmtree(out / "cluster", ignore_errors=True)
        shutil.rmtree(out / "disks", ignore_errors=True)
    return result


def check_cluster(endpoints: list[str], duration_s: float, seed: int, out_dir: Path) -> Report:
    """The metadata workload against a cluster someone else runs and breaks (Chaos Mesh on
    Kubernetes), checked the same way; faults are not in the history, so availability
    is reported as the longest gap rather than measured after each heal."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    history_path = out / HISTORY_FILE
    history_path.unlink(missing_ok=True)
    with History(history_path) as history:
        MetadataWorkload(history, endpoints, MetadataConfig(duration_s=duration_s, seed=seed,
                                                            max_ops=int(OPS_PER_S * duration_s))).run()
    report = check(load(history_path))
    (out / REPORT_FILE).write_text(report.to_json())
    return report


def _flood_workload(scenario: Scenario, history: History, cluster: ChaosCluster, config: RunConfig, out: Path):
    """The agent flood (chaos.workloads.agent_flood as a subprocess), for scenarios with one:
    it loads as long as the metadata workload, its agents starting through the first third."""
    size = scenario.flood if config.flood_agents is None else config.flood_agents
    if not scenario.flood or size <= 0:
        return None
    from chaos.workloads.flood import FloodWorkload

    local = cluster.local
    return FloodWorkload(history, cluster.endpoints(), out / "flood", agents=size,
                         seconds=config.duration_s + TAIL_S, ramp_s=config.duration_s / 3, token=local.token,
                         token_file=local.token_file if local.token else None, env=local.client_tls().environment(),
                         lease_ttl_s=scenario.flood_lease_ttl_s)


def _agent_workload(scenario: Scenario, history: History, cluster: ChaosCluster, config: RunConfig, out: Path):
    """The token-passing agents, for scenarios that crash agents."""
    if not scenario.agents:
        return None
    from chaos.workloads.agents import AgentConfig, AgentWorkload

    return AgentWorkload(history, cluster.endpoints(), out / "agents",
                         AgentConfig(duration_s=config.duration_s + TAIL_S, seed=config.seed,
                                     max_rounds=int(ROUNDS_PER_S * (config.duration_s + TAIL_S))))
