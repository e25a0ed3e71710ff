"""The chaos scenarios: which faults to inject, when, and for how long.

A scenario is a pure function from (seed, duration, cluster size) to a fault plan, so
a run is reproducible from its seed and the plan can be printed and tested without a
cluster. Targets such as "the leader" are named by role and resolved by the nemesis
at the moment the fault starts, because only then is it known who leads.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from chaos.bitrot import TARGETS

# Fault kinds the nemesis knows (chaos/nemesis.py).
KILL = "kill"                  # SIGKILL the node; restarted when healed
PAUSE = "pause"                # SIGSTOP; SIGCONT when healed
PARTITION = "partition"        # the target alone on one side, the rest on the other
DEAF = "deaf"                  # asymmetric: the target's messages go out, nothing reaches it
FLAKY = "flaky"                # every Raft link of the target resets at random
DELAY = "delay"                # every Raft link of the target delayed
RESTART = "restart"            # graceful stop and start (rolling restart); no hold
DISK_FULL = "disk-full"        # the target's file system filled up; emptied (and restarted if down) when healed
SLOW_DISK = "slow-disk"        # the target's fsyncs throttled
POWER_LOSS = "power-loss"      # every node loses power at once: unsynced writes vanish
AGENT_CRASH = "agent-crash"    # SIGKILL agent processes (the agent workload restarts them)
GROUP_RESTORE = "group-restore"  # an operator takes a savepoint of each agent group; healed: restores the
                               # groups to it (the agent workload)
CLOCK_JUMP = "clock-jump"      # the target's wall clock stepped by params["seconds"]; put right when healed
BIT_ROT = "bit-rot"            # stop the target, flip bytes in params["file"], start it; rebuilt if it refused
BOOT_SKEW = "boot-skew"        # the target restarted with its wall clock a year ahead, then made leader;
                               # its clock put right and it restarted when healed (chaos.boot_skew)
REPAIR = "repair"              # a follower rebuilt from its peers while another is stale and the target (the
                               # leader) is killed; healed once the rebuilt node is caught up (chaos.repair)
CONFIG_TYPO = "config-typo"    # the auth files every node reads left unparsable; put back when healed
                               # (chaos.config_typo)

LEADER, FOLLOWER, ANY, ALL = "leader", "follower", "any", "all"
NODE_FAULTS = (KILL, PAUSE, PARTITION, DEAF, FLAKY, DELAY, RESTART, DISK_FULL, SLOW_DISK, POWER_LOSS, CLOCK_JUMP,
               BIT_ROT, REPAIR, BOOT_SKEW, CONFIG_TYPO)
DISK_FAULTS = (DISK_FULL, SLOW_DISK, POWER_LOSS)
AGENT_FAULTS = (AGENT_CRASH, GROUP_RESTORE)  # faults of the agent workload, not of a node


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the workload starts
    kind: str
    target: str = ANY
    hold: float = 0.0  # seconds until healed (0: instantaneous)
    params: dict = field(default_factory=dict, hash=False)

    @property
    def heal_at(self) -> float:
        return self.at + self.hold


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    plan: Callable[[random.Random, float, int], list[Fault]]
    agents: bool = False  # needs the agent workload (agent processes to crash)
    flood: int = 0  # agents of the agent flood (chaos.workloads.agent_flood) to run alongside; 0: none
    flood_lease_ttl_s: float | None = None  # the lease of the flood's agents (None: the flood's own)

    def faults(self, seed: int, duration: float, nodes: int = 3) -> list[Fault]:
        rng = random.Random(f"{self.name}-{seed}")
        plan = sorted(self.plan(rng, duration, nodes), key=lambda f: f.at)
        return [f for f in plan if f.heal_at <= duration]  # every fault heals inside the run

    def needs_disks(self, seed: int, duration: float, nodes: int = 3) -> bool:
        return uses_disks(self.faults(seed, duration, nodes))


def uses_disks(plan: list[Fault]) -> bool:
    """Whether a plan has disk faults (which need loop-device disks under the nodes)."""
    return any(f.kind in DISK_FAULTS for f in plan)


def _every(rng: random.Random, duration: float, gap: tuple[float, float], start: float = 2.0) -> list[float]:
    """Start times spread over the run with random gaps; bounded by the duration."""
    times, t = [], start
    while t < duration:
        times.append(t)
        t += rng.uniform(*gap)
    return times


def _repeat(kind: str, target: str, gap: tuple[float, float], hold: tuple[float, float],
            **params: object) -> Callable[[random.Random, float, int], list[Fault]]:
    def plan(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
        faults, busy_until = [], 0.0
        for t in _every(rng, duration, gap):
            if t < busy_until:
                continue
            fault = Fault(round(t, 2), kind, target, round(rng.uniform(*hold), 2), dict(params))
            faults.append(fault)
            busy_until = fault.heal_at + 1.0  # a moment healed between faults
        return faults
    return plan


def _rolling_restart(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    rounds = _every(rng, duration, (4.0, 6.0))
    return [Fault(round(t, 2), RESTART, f"node:{i % nodes}") for i, t in enumerate(rounds)]


def _disk_full(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    plan = _repeat(DISK_FULL, ANY, (8.0, 12.0), (3.0, 5.0))(rng, duration, nodes)
    return [Fault(f.at, f.kind, rng.choice((LEADER, FOLLOWER)), f.hold) for f in plan]


def _power_loss(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    return [Fault(round(t, 2), POWER_LOSS, ALL, 1.0) for t in _every(rng, duration, (8.0, 12.0), start=3.0)]


def _clock_jump(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    """An hour either way, on the leader most often (its clock stamps the replicated time)."""
    plan = _repeat(CLOCK_JUMP, LEADER, (5.0, 8.0), (3.0, 5.0))(rng, duration, nodes)
    return [Fault(f.at, f.kind, rng.choice((LEADER, LEADER, FOLLOWER)), f.hold,
                  {"seconds": rng.choice((3600.0, -3600.0))}) for f in plan]


def _bit_rot(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    """One node at a time (a rebuilt node must not tip an election), each file in turn."""
    plan = _repeat(BIT_ROT, FOLLOWER, (6.0, 9.0), (3.0, 4.0))(rng, duration, nodes)
    return [Fault(f.at, f.kind, f.target, f.hold, {"file": TARGETS[n % len(TARGETS)]})
            for n, f in enumerate(plan)]


def _group_restore(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    """Savepoint at the fault, restore at its heal; half a second later an agent crashes,
    while the restore's orders may still be carried out (the restores are 5-7 s apart,
    each held 2-3 s, so the crash is over before the next savepoint)."""
    restores = _repeat(GROUP_RESTORE, "agents", (5.0, 7.0), (2.0, 3.0))(rng, duration, nodes)
    return restores + [Fault(round(f.heal_at + 0.5, 2), AGENT_CRASH, "agents", 0.5, {"count": 1}) for f in restores]


# The agent-flood scenario's flood: past what 2 cores serve without shedding.
FLOOD_AGENTS = 1000

# A repair fault's hold: its injection alone (a stale node stopped, writes, a node
# stopped and rebuilt, the leader killed, two nodes started and two elections) takes
# most of it on 2 cores. Its heal starts the leader and waits for the rebuilt node to
# catch up, a few seconds more: the next fault is planned after those.
REPAIR_HOLD = (6.0, 8.0)
REPAIR_HEAL_S = 4.0


def _repair(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    """The first at 2 s, so a 12 s smoke run holds one; then one every 14-18 s."""
    return _repeat(REPAIR, LEADER, (14.0, 18.0), REPAIR_HOLD)(rng, duration, nodes)


# The config-typo scenario's flood, and the lease its agents hold: shorter than a typo
# lasts, so a coordinator that stopped granting while a file was broken would let them
# expire (the first typo comes once most of them heartbeat: the flood starts through
# the first third of the run). Few agents: when the flood stops, their leases run out
# and the leader declares them failed one recovery after another, a few a second,
# which must be over well within the run's wait for the nodes to converge.
TYPO_FLOOD_AGENTS = 30
TYPO_FLOOD_LEASE_TTL_S = 4.0
TYPO_HOLD = (6.0, 7.5)


def _config_typo(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    return [Fault(round(t, 2), CONFIG_TYPO, ALL, round(rng.uniform(*TYPO_HOLD), 2))
            for t in _every(rng, duration, (12.0, 16.0), start=4.0)]


# A boot-skew fault's hold: a restart and up to a few elections won by pausing leaders;
# its heal restarts the node again, which the next fault waits for.
BOOT_SKEW_HOLD = (6.0, 9.0)
BOOT_SKEW_HEAL_S = 2.0


def _boot_skew(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    """The first at 2 s, so a 12 s smoke run holds one; then one every 12-16 s."""
    return _repeat(BOOT_SKEW, FOLLOWER, (12.0 + BOOT_SKEW_HEAL_S, 16.0), BOOT_SKEW_HOLD)(rng, duration, nodes)


MIX_KINDS = (KILL, PAUSE, PARTITION, DEAF, FLAKY, DELAY, DISK_FULL, SLOW_DISK, AGENT_CRASH, REPAIR, BOOT_SKEW,
             CONFIG_TYPO, GROUP_RESTORE)
# Faults that need a target of their own kind and hold longer than the mix's others.
_MIX_TARGET = {REPAIR: LEADER, BOOT_SKEW: FOLLOWER, CONFIG_TYPO: ALL}
_MIX_HOLD = {REPAIR: REPAIR_HOLD, BOOT_SKEW: BOOT_SKEW_HOLD}
_MIX_HEAL_S = {REPAIR: REPAIR_HEAL_S, BOOT_SKEW: BOOT_SKEW_HEAL_S}


def _random_mix(rng: random.Random, duration: float, nodes: int) -> list[Fault]:
    faults, busy_until = [], 0.0
    for t in _every(rng, duration, (2.0, 5.0)):
        if t < busy_until:
            continue
        kind = rng.choice(MIX_KINDS)
        target = "agents" if kind in AGENT_FAULTS else _MIX_TARGET.get(kind) or rng.choice((LEADER, FOLLOWER, ANY))
        params = {"count": 1} if kind == AGENT_CRASH else {"delay_ms": 80} if kind == DELAY else {}
        hold = _MIX_HOLD.get(kind, (1.5, 4.0))
        fault = Fault(round(t, 2), kind, target, round(rng.uniform(*hold), 2), params)
        faults.append(fault)
        busy_until = fault.heal_at + _MIX_HEAL_S.get(kind, 0.5)
    return faults


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("leader-kill-loop", "SIGKILL the Raft leader, restart it a few seconds later, again and again",
             _repeat(KILL, LEADER, (5.0, 8.0), (1.5, 3.0))),
    Scenario("follower-pause", "SIGSTOP a follower for a few seconds (a GC pause, a frozen VM), then SIGCONT",
             _repeat(PAUSE, FOLLOWER, (4.0, 7.0), (2.0, 4.0))),
    Scenario("partition-leader", "cut the leader off from the majority; the majority elects a new one",
             _repeat(PARTITION, LEADER, (6.0, 9.0), (3.0, 5.0))),
    Scenario("asymmetric-partition", "the leader can send but hears nothing back",
             _repeat(DEAF, LEADER, (6.0, 9.0), (3.0, 5.0))),
    Scenario("flapping-links", "a node's Raft links reset at random",
             _repeat(FLAKY, ANY, (4.0, 6.0), (2.5, 4.0), probability=0.8)),
    Scenario("disk-full", "a node's file system fills up; it is emptied and the node restarted",
             _disk_full),
    Scenario("slow-disk", "a node's fsyncs slowed to tens of milliseconds",
             _repeat(SLOW_DISK, ANY, (5.0, 8.0), (3.0, 5.0))),
    Scenario("power-loss", "every node loses power at once: what was not fsynced is gone",
             _power_loss),
    Scenario("rolling-restart", "stop and start each node in turn, as an upgrade does",
             _rolling_restart),
    Scenario("agent-crash-storm", "SIGKILL agent processes (mid-checkpoint, mid-rollback) and restart them",
             _repeat(AGENT_CRASH, "agents", (2.0, 4.0), (0.5, 1.0), count=2), agents=True),
    Scenario("group-restore", "an operator takes a savepoint of each agent group, lets it run on, and "
             "restores the whole group to it; agents crash in between",
             _group_restore, agents=True),
    Scenario("random-mix", "a random mix of all of the above, one at a time", _random_mix, agents=True),
    Scenario("clock-jump", "a node's wall clock (the leader's most often) stepped an hour ahead or back, "
             "then put right", _clock_jump, agents=True),
    Scenario("agent-flood", "ramp a flood of heartbeating agents past saturation while the leader is "
             "SIGKILLed again and again; no agent that kept heartbeating may be declared failed",
             _repeat(KILL, LEADER, (5.0, 8.0), (1.5, 3.0)), flood=FLOOD_AGENTS),
    Scenario("bit-rot", "bytes flipped in a stopped follower's journal, store or snapshot; it must refuse "
             "to start (and is rebuilt from its peers) or agree with them", _bit_rot),
    Scenario("repair", "a follower stopped and rebuilt from its peers (raftpoint repair --from-peers) right after "
             "writes it held with the leader only; the leader killed, a stale follower started beside it: no "
             "acknowledged write may be lost", _repair),
    Scenario("boot-skew", "a follower restarted with its wall clock a year ahead, then made leader by pausing "
             "the others' leaders: no write may be refused for time, before or after", _boot_skew, agents=True),
    Scenario("config-typo", "the bindings and tokens files every node reads left unparsable for longer than "
             "a lease, then put back; nodes keep the last good version: no heartbeating agent may be declared "
             "failed", _config_typo, flood=TYPO_FLOOD_AGENTS, flood_lease_ttl_s=TYPO_FLOOD_LEASE_TTL_S),
)}
