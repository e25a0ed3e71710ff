"""One group of the agent workload: its driver thread, its restarts, its audits.

The driver is the only thing that talks to the group's agent processes, and it does
so under `lock`, one operation at a time: the nemesis's crash() and restart_crashed()
take the lock too, so a fault never lands in the middle of a request and the history
of the group's process is sequential. The agents' own threads (heartbeats, rollback
orders) run on regardless; the journals tell the driver what they did.

What the driver delegates: recording every request (group_calls), the crash kinds
(agent_crashes; a crashed agent is held down until restart_crashed(), except a
zombie, whose replacement is already running), and garbage collection with the
final check of the checkpoints (group_checkpoints). It also plays the operator who
takes a savepoint and later restores the group to it.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from agent_client.blobs.location import local_root, sub_location
from chaos.history import INFO, OK, History
from chaos.tokens import invariants as judged
from chaos.tokens.agent import DROP_REDELIVERIES_ENV
from chaos.tokens.ledger import Ledger
from chaos.tokens.process import AgentDied, AgentProcess
from chaos.tokens.traffic import MODES, InFlight, TokenGroup, Traffic, savepoint_cut
from chaos.workloads.agent_crashes import ZOMBIE, AgentCrashes
from chaos.workloads.group_calls import GroupCalls
from chaos.workloads.group_checkpoints import GroupCheckpoints
from coordinator.api.v1 import coordinator_pb2 as pb

# Planted driver faults, to prove each invariant can fail.
PLANT_ORPHAN = "orphan"  # deliver a message whose send a recovery undid, bypassing unwrap()
PLANT_DUPLICATE = "duplicate"  # deliver a duplicate copy, bypassing unwrap()
PLANT_DROP = "drop-redelivery"  # every agent loses its first re-delivery
PLANT_COUNT_TWICE = "count-twice"  # an audit counts a delivered message as in transit too
PLANT_LOSE_BLOB = "lose-blob"  # an acknowledged checkpoint's blob is deleted before the final check
PLANTS = (PLANT_ORPHAN, PLANT_DUPLICATE, PLANT_DROP, PLANT_COUNT_TWICE, PLANT_LOSE_BLOB)
STATUS_POLL_S = 0.3  # at most this often a GetGroup to see whether a recovery finished
REVIVE_BACKOFF_S = 1.0


@dataclass(frozen=True)
class GroupConfig:
    """What a group needs of AgentConfig (chaos.workloads.agents)."""

    agents: int
    tokens: int
    traffic: Traffic
    lease_ttl_s: float
    retention: int
    agent_deadline_s: float
    admin_deadline_s: float
    recovery_timeout_s: float
    audit_every_s: float
    gc_every_s: float
    round_pause_s: float
    max_rounds: int
    plant: str | None
    seed: int
    blob_store: str | None = None  # a location each group gets a sub-prefix of; None: a directory per group


class GroupDriver:
    def __init__(self, history: History, endpoints: Sequence[str], root: Path, mode: str, group: str,
                 config: GroupConfig) -> None:
        self.history, self.mode, self.name, self.config = history, mode, group, config
        self.process = f"agents-{mode}"
        ids = [f"a{i}" for i in range(config.agents)]
        blob_dir = root / group / "blobs" if config.blob_store is None else sub_location(config.blob_store, group)
        states = None if local_root(blob_dir) is not None else root / group / "state"  # logs off the bucket
        env = {DROP_REDELIVERIES_ENV: "1"} if config.plant == PLANT_DROP else {}
        procs = {a: AgentProcess(a, group=group, endpoints=endpoints, blob_dir=blob_dir,
                                 log_dir=root / group / "logs", members=ids, tokens=config.tokens, env=env,
                                 deadline=config.agent_deadline_s, state_dir=None if states is None else states / a)
                 for a in ids}
        self.calls = GroupCalls(history, self.process, group, endpoints, admin_deadline_s=config.admin_deadline_s,
                                on_died=self._unwedge)
        self.world = TokenGroup(group, MODES[mode], procs, config.tokens, random.Random(f"{config.seed}-{mode}"),
                                config.traffic, call=self.calls.agent, tolerant=True, on_event=self.calls.journal)
        # The ledger's every event goes into the history, so it can be judged again from there.
        self.ledger_process = f"{self.process}-ledger"  # never has an operation open: notes only
        history.note(self.ledger_process, judged.OPEN, {"group": group, "agents": ids, "tokens_each": config.tokens})
        self.world.ledger.journal = lambda event, args: history.note(
            self.ledger_process, judged.EVENT, {"group": group, "event": event, "args": args})
        self.crashes = AgentCrashes(self.world, self.calls, restart=self._restart, crashable=self.crashable)
        self.checkpoints = GroupCheckpoints(self.calls, self.world.ledger, blob_dir)
        self.lock = threading.Lock()
        self.held: set[str] = set()  # crashed by the nemesis: down until restart_crashed()
        self.problems: list[str] = []  # what kept the final checks from running
        self.recovery_s: list[float] = []
        self.final_audit = False
        self._audit_due: str | None = None
        self._restarted_at: float | None = None
        self._next_poll = 0.0
        self._revive_at: dict[str, float] = {}
        self._savepoints = 0
        self._savepoint: tuple[str, dict[str, int]] | None = None  # the newest: its name and checkpoints
        self._restored: str | None = None  # the savepoint last restored to

    @property
    def ids(self) -> list[str]:
        return self.world.ids

    @property
    def ledger(self) -> Ledger:
        return self.world.ledger

    def up(self) -> list[str]:
        return [a for a in self.ids if self.world.procs[a].alive]

    def crashable(self) -> list[str]:
        return [a for a in self.up() if a not in self.held]

    def _start_epoch(self, round_: int) -> None:
        self.calls.start_epoch()

    # ---- unresponsive agents ---------------------------------------------------------------
    def _unwedge(self, agent: str) -> None:
        """A process that stopped answering but still runs would answer the next request
        with this one's reply: kill it (it is restarted like a crashed one)."""
        proc = self.world.procs[agent]
        if proc.alive:
            proc.dump_stacks()
            proc.kill()
            self.history.note(self.process, "agent-unresponsive", {"group": self.name, "agent": agent})

    # ---- lifecycle ----------------------------------------------------------------------
    def setup(self, attempts: int = 5) -> None:
        """Create the group and start every agent (the cluster may still be electing)."""
        spec = pb.GroupSpec(group=self.name, mode=self.world.mode, lease_ttl_s=self.config.lease_ttl_s,
                            checkpoint_interval_s=3600.0, retention=self.config.retention)
        request = pb.CreateGroupRequest(request_id=self.calls.rid("create"), spec=spec)
        for _ in range(attempts):
            if self.calls.call("create_group", "CreateGroup", request, {"mode": self.mode}).ok:
                break
        else:
            raise RuntimeError(f"agent workload: cannot create group {self.name}")
        procs = self.world.procs
        for proc in procs.values():
            proc.spawn()
        for a in self.ids:
            try:
                self.calls.agent(a, "start", {"group": self.name}, procs[a].reply)
            except (AgentDied, RuntimeError) as exc:
                raise RuntimeError(f"agent workload: {self.name}/{a} did not start: {exc}") from exc

    def run(self, deadline: float, stop: threading.Event) -> None:
        """The driver loop (a thread): rounds of traffic until the deadline or stop."""
        c = self.config
        rounds = 0
        next_audit, next_gc = time.monotonic() + c.audit_every_s, time.monotonic() + c.gc_every_s
        while not stop.is_set() and time.monotonic() < deadline and rounds < c.max_rounds:
            with self.lock:
                self._revive()
                self._observe()
                now = time.monotonic()
                if now >= next_audit and self._audit_due is None:
                    self._audit_due = "periodic"
                if self._audit_due is not None and self._try_audit(self._audit_due):
                    next_audit = time.monotonic() + c.audit_every_s
                rounds += 1
                self.world.step(rounds, now, alive=self.up(),
                                start_epoch=self._start_epoch if self.world.coordinated else None)
                self._plant_step(now)
                if now >= next_gc:
                    self.checkpoints.gc()
                    next_gc = time.monotonic() + c.gc_every_s
            stop.wait(c.round_pause_s)

    # ---- observing recoveries and auditing ------------------------------------------------
    def _observe(self) -> None:
        for rid in self.world.ingest():
            self._audit_due = f"after recovery {rid}"

    def _try_audit(self, label: str, *, final: bool = False) -> bool:
        """Tokens in agents + in transit, at a quiet moment: every agent up, the group
        RUNNING (every rollback order acknowledged) before and after the agents are read."""
        now = time.monotonic()
        if set(self.up()) != set(self.ids) or (now < self._next_poll and not final):
            return False
        self._next_poll = now + STATUS_POLL_S
        before = self.calls.group_info()
        if not before.ok or before.response.group.state != pb.RUNNING:
            return False
        if self._restarted_at is not None:
            self.recovery_s.append(now - self._restarted_at)
            self._restarted_at = None
        self.history.invoke(self.process, "audit", {"group": self.name, "label": label})
        statuses = {}
        for a in self.ids:
            try:
                statuses[a] = self.world.procs[a].request("status")
            except (AgentDied, RuntimeError) as exc:
                self.history.complete(self.process, INFO, error=f"{a}: {exc}")
                if isinstance(exc, AgentDied):
                    self._unwedge(a)
                return False
        after = self.calls.group_info()
        same = (after.ok and after.response.group.state == pb.RUNNING
                and after.response.group.recovery_id == before.response.group.recovery_id)
        fenced = [a for a, s in statuses.items() if s.get("fenced")]
        if not same or fenced:
            self.history.complete(self.process, INFO, {"fenced": fenced}, error="not a quiet moment")
            for a in fenced:  # declared failed behind our back (a lease expired): it can only restart
                self.world.procs[a].kill()
            return False
        self.world.ingest()
        network = self.world.network.carrying()
        if self.config.plant == PLANT_COUNT_TWICE:
            # A delivered message whose tokens the audit would count twice: its send stands
            # (an undone send carries nothing in transit) and its delivery too (an undone
            # delivery's tokens are in no agent, so counting them once would balance).
            ledger = self.world.ledger
            generations = {a: s["generation"] for a, s in statuses.items()}
            counted = next((m for m in reversed(self.world.recent())
                            if m.id not in network and ledger.in_transit(m, generations) and m.deliveries
                            and all(ledger.delivery_undone(d) is None for d in m.deliveries)), None)
            if counted is not None:
                network = network + [counted.id]
                self.world.stats["planted"] += 1
        tally = self.world.audit(label, statuses, network)
        self.history.complete(self.process, OK, {
            "in_agents": tally.in_agents, "in_transit": tally.in_transit, "total": tally.total,
            "conserved": tally.conserved, "recovery_id": before.response.group.recovery_id,
            "tokens": {a: s["tokens"] for a, s in statuses.items()}})
        self._audit_due = None
        self.final_audit = self.final_audit or final
        return True

    # ---- restarts -----------------------------------------------------------------------
    def _restart(self, a: str, why: str = "restart") -> bool:
        proc = self.world.procs[a]
        proc.kill()  # nothing if already dead
        self._restarted_at = self._restarted_at or time.monotonic()
        try:
            reply = self.calls.agent(a, "restart", {"why": why}, lambda: proc.spawn().reply())
        except (AgentDied, RuntimeError):
            proc.kill()
            self._revive_at[a] = time.monotonic() + REVIVE_BACKOFF_S
            return False
        self.history.note(self.process, "restarted", {"group": self.name, "agent": a,
                                                      "restore": reply.get("restore")})
        return True

    def _revive(self) -> None:
        """Agents that died without the nemesis holding them down (a hook fired late, a
        restart failed, an unresponsive process) are started again."""
        for a in self.ids:
            if a not in self.held and not self.world.procs[a].alive and time.monotonic() >= self._revive_at.get(a, 0):
                self._restart(a, "revive")

    def restart_held(self) -> list[str]:
        names = []
        for a in sorted(self.held):
            self.held.discard(a)
            if not self.world.procs[a].alive:
                self._restart(a)
                names.append(f"{self.name}/{a}")
        return names

    # ---- an operator's savepoints and restores -------------------------------------------
    def take_savepoint(self) -> list[str]:
        """A new savepoint of the group (the previous one deleted: it was restored to
        already, and keeps checkpoints from garbage collection)."""
        if self._savepoint is not None:
            old = self._savepoint[0]
            self.calls.call("delete_savepoint", "DeleteSavepoint", pb.DeleteSavepointRequest(
                request_id=self.calls.rid("savepoint-delete"), group=self.name, name=old), {"name": old})
        self._savepoints += 1
        name = f"sp-{self._savepoints}"
        taken = self.calls.call("create_savepoint", "CreateSavepoint", pb.CreateSavepointRequest(
            request_id=self.calls.rid("savepoint"), group=self.name, name=name), {"name": name},
            lambda r: {"checkpoints": savepoint_cut(r.savepoint)})
        self._savepoint = (name, savepoint_cut(taken.response.savepoint)) if taken.ok else None
        return [f"{self.name}/{name}"] if taken.ok else []

    def restore_savepoint(self) -> list[str]:
        """The group restored to the savepoint take_savepoint() took; the ledger judges the
        restore once the agents report carrying it out."""
        if self._savepoint is None or self._restored == self._savepoint[0]:
            return []
        name, cut = self._savepoint
        self._restored = name
        restored = self.calls.call("restore", "RestoreGroup", pb.RestoreGroupRequest(
            request_id=self.calls.rid("restore"), group=self.name, savepoint=name), {"savepoint": name},
            lambda r: {"recovery_id": r.recovery_id, "line": {s.agent_id: s.checkpoint_index for s in r.steps}})
        if not restored.ok:
            return []
        self.ledger.restore(restored.response.recovery_id, name, cut)
        return [f"{self.name}/{name}"]

    # ---- crashes ------------------------------------------------------------------------
    def crash(self, a: str, kind: str) -> list[str]:
        """Crash agent `a` the `kind` way; returns what was crashed (empty if nothing)."""
        if a in self.held or not self.world.procs[a].alive:
            return []
        happened, victim = self.crashes.crash(a, kind)
        if happened != ZOMBIE:
            self.held.add(victim)
        return [f"{self.name}/{victim}:{happened}"]

    # ---- planted faults -------------------------------------------------------------------
    def _plant_step(self, now: float) -> None:
        plant, net = self.config.plant, self.world.network
        if plant == PLANT_ORPHAN:
            chosen = [e for e in net.entries if not e.copy and e.message.receiver in self.up()
                      and self.ledger.send_undone(e.message) is not None]
        elif plant == PLANT_DUPLICATE:
            chosen = [e for e in net.entries if e.copy and e.message.receiver in self.up()
                      and self.ledger.live(e.message)]
        else:
            return
        for entry in chosen[:1]:
            net.entries.remove(entry)
            self._bypass(entry)

    def _bypass(self, entry: InFlight) -> None:
        try:
            self.world.deliver(entry, bypass=True)
            self.world.stats["planted"] += 1
        except (AgentDied, RuntimeError):
            pass

    # ---- the end ---------------------------------------------------------------------------
    def settle(self) -> None:
        """After the run: every agent up, the group RUNNING, everything in flight delivered,
        and a final audit at a quiet moment (each step bounded)."""
        c = self.config
        self.held.clear()
        end = time.monotonic() + c.recovery_timeout_s
        while time.monotonic() < end:
            self._revive()
            self._observe()
            if set(self.up()) == set(self.ids):
                info = self.calls.group_info()
                if info.ok and info.response.group.state == pb.RUNNING:
                    break
            time.sleep(STATUS_POLL_S)
        else:
            self.problems.append(f"{self.name} did not settle within {c.recovery_timeout_s:.0f}s "
                                 f"(agents up: {self.up()})")
        self.world.drain(time.monotonic(), self.up())
        end = time.monotonic() + c.recovery_timeout_s
        while time.monotonic() < end and not self._try_audit("at the end", final=True):
            self._revive()
            self._observe()
            time.sleep(STATUS_POLL_S)
        if not self.final_audit:
            self.problems.append(f"{self.name}: no quiet moment for a final audit within {c.recovery_timeout_s:.0f}s")
        self.checkpoints.finish_gc()

    def check_checkpoints(self) -> None:
        """Every acknowledged checkpoint still stands (group_checkpoints)."""
        if self.config.plant == PLANT_LOSE_BLOB:
            self.checkpoints.lose_one()
        problem = self.checkpoints.check()
        if problem is not None:
            self.problems.append(problem)

    def stop_agents(self) -> None:
        for proc in self.world.procs.values():
            proc.stop(5)
