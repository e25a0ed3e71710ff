"""One group of the agent workload: its driver thread, its agent faults, its final checks.

The driver is the only thing that talks to the group's agent processes, and it does
so under `lock`, one operation at a time: the nemesis's crash() and restart_crashed()
take the lock too, so a fault never lands in the middle of a request and the history
of the group's process is sequential. The agents' own threads (heartbeats, rollback
orders) run on regardless; the journals tell the driver what they did.

Crash kinds (the victim ends up dead and held down until restart_crashed(), except a
zombie, whose replacement is already running):
- kill: SIGKILL.
- after-blob: armed, then asked to checkpoint: it dies between the blob write and the
  metadata commit.
- after-commit: armed, then asked to checkpoint (coordinated: an epoch is started and
  its order thread cuts): it dies once the coordinator applied the commit, before it
  used the answer.
- mid-rollback: armed, then another agent whose failure rolls it back (what-if) is
  killed and restarted: it dies having restored its checkpoint, before acknowledging.
- zombie: a replacement process registers while the old one keeps running; the old
  one then sends a message (its receiver must refuse it) and tries to checkpoint (the
  coordinator must refuse it), and is killed.
A kind that cannot be set up (no what-if reaches the victim, no epoch could start, no
leader in time) falls back to a plain kill; the history says so.
"""
from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_client.blobstore import BlobError, open_blob_store
from agent_client.blobs.location import local_root, sub_location
from chaos.tokens.agent import AFTER_BLOB, AFTER_COMMIT, DROP_REDELIVERIES_ENV, MID_ROLLBACK
from chaos.tokens.ledger import Finding, Ledger
from chaos.tokens.process import AgentDied, AgentProcess
from chaos.tokens.traffic import MODES, InFlight, TokenGroup, Traffic
from chaos.client import Outcome, RecordingClient, Request
from chaos.history import FAIL, INFO, OK, History, Op
from coordinator.api.v1 import coordinator_pb2 as pb

KILL, ZOMBIE = "kill", "zombie"
CRASH_KINDS = (KILL, AFTER_BLOB, AFTER_COMMIT, MID_ROLLBACK, ZOMBIE)
# Planted driver faults, to prove each invariant can fail.
PLANT_ORPHAN = "orphan"  # deliver a message whose send a recovery undid, bypassing unwrap()
PLANT_DUPLICATE = "duplicate"  # deliver a duplicate copy, bypassing unwrap()
PLANT_DROP = "drop-redelivery"  # every agent loses its first re-delivery
PLANT_COUNT_TWICE = "count-twice"  # an audit counts a delivered message as in transit too
PLANT_LOSE_BLOB = "lose-blob"  # an acknowledged checkpoint's blob is deleted before the final check
PLANTS = (PLANT_ORPHAN, PLANT_DUPLICATE, PLANT_DROP, PLANT_COUNT_TWICE, PLANT_LOSE_BLOB)
DEFINITE = ("FAILED_PRECONDITION", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS")
HOOK_WAIT_S = 10.0  # an armed crash that needs the coordinator gets this long to fire
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


def _definite(error: str) -> bool:
    return any(code + ":" in error for code in DEFINITE)


def _brief(reply: Mapping[str, Any]) -> dict[str, Any]:
    """A reply as the history keeps it: without envelopes and long lists."""
    return {k: v for k, v in reply.items() if k not in ("envelope", "redelivered", "rollbacks", "in_transit")}


class GroupDriver:
    def __init__(self, history: History, endpoints: Sequence[str], root: Path, mode: str, group: str,
                 config: GroupConfig) -> None:
        self.history, self.mode, self.name, self.config = history, mode, group, config
        self.process = f"agents-{mode}"
        ids = [f"a{i}" for i in range(config.agents)]
        self.blob_dir = root / group / "blobs" if config.blob_store is None else sub_location(config.blob_store, group)
        states = None if local_root(self.blob_dir) is not None else root / group / "state"  # logs off the bucket
        env = {DROP_REDELIVERIES_ENV: "1"} if config.plant == PLANT_DROP else {}
        procs = {a: AgentProcess(a, group=group, endpoints=endpoints, blob_dir=self.blob_dir,
                                 log_dir=root / group / "logs", members=ids, tokens=config.tokens, env=env,
                                 deadline=config.agent_deadline_s, state_dir=None if states is None else states / a)
                 for a in ids}
        self.world = TokenGroup(group, MODES[mode], procs, config.tokens, random.Random(f"{config.seed}-{mode}"),
                                config.traffic, call=self._call, tolerant=True, on_event=self._event)
        self.admin = RecordingClient(history, f"{self.process}-admin", endpoints, deadline=config.admin_deadline_s,
                                     rpc_timeout=1.0)
        self.blobs = open_blob_store(self.blob_dir)
        self.lock = threading.Lock()
        self.held: set[str] = set()  # crashed by the nemesis: down until restart_crashed()
        self.crashes: Counter[str] = Counter()  # by the kind that really happened
        self.fallbacks: Counter[str] = Counter()  # kinds that could not be set up and became kills
        self.zombie: Counter[str] = Counter()
        self.zombie_findings: list[Finding] = []
        self.checkpoint_findings: list[Finding] = []
        self.checkpoint_counts: dict[str, int] = {}
        self.problems: list[str] = []  # what kept the final checks from running
        self.collected: set[str] = set()  # blob URIs garbage collection returned
        self.gc_unknown = 0
        self.recovery_s: list[float] = []
        self.sent_ops: dict[str, Op] = {}  # message id -> the op that sent it, for counter-examples
        self.final_audit = False
        self._last_op: Op | None = None
        self._rids = 0
        self._gc_pending: Request | None = None
        self._audit_due: str | None = None
        self._restarted_at: float | None = None
        self._next_poll = 0.0
        self._revive_at: dict[str, float] = {}

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

    # ---- recording --------------------------------------------------------------------
    def _call(self, agent: str, f: str, value: dict[str, Any], thunk: Callable[[], dict[str, Any]],
              process: str | None = None) -> dict[str, Any]:
        """One request to an agent process as a history operation: ok with the reply, fail
        for a refusal the coordinator decided, info when the outcome is unknown."""
        process = process or self.process
        self.history.invoke(process, f, {"group": self.name, "agent": agent, **value})
        try:
            reply = thunk()
        except AgentDied as exc:
            self._last_op = self.history.complete(process, INFO, error=f"AgentDied: {exc}")
            self._unwedge(agent)
            raise
        except RuntimeError as exc:
            kind = FAIL if _definite(str(exc)) else INFO
            self._last_op = self.history.complete(process, kind, error=str(exc))
            raise
        self._last_op = self.history.complete(process, OK, _brief(reply))
        if f == "send" and reply.get("id"):
            self.sent_ops[reply["id"]] = self._last_op
        return reply

    def _unwedge(self, agent: str) -> None:
        """A process that stopped answering but still runs would answer the next request
        with this one's reply: kill it (it is restarted like a crashed one)."""
        proc = self.world.procs[agent]
        if proc.alive:
            proc.dump_stacks()
            proc.kill()
            self.history.note(self.process, "agent-unresponsive", {"group": self.name, "agent": agent})

    def _event(self, agent: str, ev: Mapping[str, Any]) -> None:
        kind = ev.get("ev")
        if kind in ("line", "redelivered", "commit"):
            self.history.note(self.process, {"line": "recovery-line", "redelivered": "redelivered",
                                             "commit": "checkpoint-acknowledged"}[kind],
                              {"group": self.name, "agent": agent, **{k: v for k, v in ev.items() if k != "ev"}})

    def _rid(self, what: str) -> str:
        self._rids += 1
        return f"{self.name}-{what}-{self._rids}"

    def _admin(self, f: str, method: str, message: Any, value: dict[str, Any],
               answer: Callable[[Any], Any] = lambda r: None) -> Outcome:
        """An admin call, recorded; no "rid" in the value, so the metadata invariants,
        which index requests by it, leave this workload's groups alone."""
        return self.admin.send(Request(f, "AdminService", method, message, {"group": self.name, **value}, answer))

    def _group_info(self) -> Outcome:
        return self._admin("get_group", "GetGroup", pb.GetGroupRequest(group=self.name), {},
                           lambda r: {"state": pb.GroupState.Name(r.group.state), "recovery_id": r.group.recovery_id})

    def _start_epoch(self, round_: int) -> None:
        self._admin("start_epoch", "StartEpoch", pb.StartEpochRequest(request_id=self._rid("epoch"), group=self.name),
                    {}, lambda r: {"epoch": r.epoch.epoch})

    # ---- lifecycle ----------------------------------------------------------------------
    def setup(self, attempts: int = 5) -> None:
        """Create the group and start every agent (the cluster may still be electing)."""
        spec = pb.GroupSpec(group=self.name, mode=self.world.mode, lease_ttl_s=self.config.lease_ttl_s,
                            checkpoint_interval_s=3600.0, retention=self.config.retention)
        request = pb.CreateGroupRequest(request_id=self._rid("create"), spec=spec)
        for _ in range(attempts):
            if self._admin("create_group", "CreateGroup", request, {"mode": self.mode}).ok:
                break
        else:
            raise RuntimeError(f"agent workload: cannot create group {self.name}")
        procs = self.world.procs
        for proc in procs.values():
            proc.spawn()
        for a in self.ids:
            try:
                self._call(a, "start", {"group": self.name}, procs[a].reply)
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
                    self._gc()
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
        before = self._group_info()
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
        after = self._group_info()
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
        if self.config.plant == PLANT_COUNT_TWICE and self.world.recent():
            network = network + [self.world.recent()[-1].id]
            self.world.stats["planted"] += 1
        tally = self.world.audit(label, statuses, network)
        self.history.complete(self.process, OK, {
            "in_agents": tally.in_agents, "in_transit": tally.in_transit, "total": tally.total,
            "conserved": tally.conserved, "recovery_id": before.response.group.recovery_id,
            "tokens": {a: s["tokens"] for a, s in statuses.items()}})
        self._audit_due = None
        self.final_audit = self.final_audit or final
        return True

    # ---- garbage collection -------------------------------------------------------------
    def _gc(self) -> None:
        """Collect, then delete the returned blobs nothing still listed refers to (blobs
        are content-addressed: two checkpoints can share one)."""
        if self._gc_pending is None:
            self._gc_pending = Request("gc", "AdminService", "GarbageCollect", pb.GarbageCollectRequest(
                request_id=self._rid("gc"), group=self.name), {"group": self.name},
                lambda r: {"uris": sorted(r.deletable_blob_uris), "bytes": r.bytes})
        outcome = self.admin.send(self._gc_pending)
        if outcome.type == INFO:
            return  # sent again, with the same request id, next time
        self._gc_pending = None
        uris = set(outcome.response.deletable_blob_uris) if outcome.ok else set()
        if not uris:
            return
        self.collected |= uris
        listing = self._list()
        if listing is None:
            return  # not known what is still referenced: delete nothing
        for uri in sorted(uris - {m.blob_uri for m in listing}):
            try:
                self.blobs.delete(uri)
            except BlobError:
                pass  # deleted already

    def _list(self) -> list[pb.CheckpointMeta] | None:
        outcome = self._admin("list_checkpoints", "ListCheckpoints", pb.ListCheckpointsRequest(group=self.name), {},
                              lambda r: {"checkpoints": len(r.checkpoints)})
        return list(outcome.response.checkpoints) if outcome.ok else None

    # ---- restarts -----------------------------------------------------------------------
    def _restart(self, a: str, why: str = "restart") -> bool:
        proc = self.world.procs[a]
        proc.kill()  # nothing if already dead
        self._restarted_at = self._restarted_at or time.monotonic()
        try:
            reply = self._call(a, "restart", {"why": why}, lambda: proc.spawn().reply())
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

    # ---- crashes ------------------------------------------------------------------------
    def crash(self, a: str, kind: str) -> list[str]:
        """Crash agent `a` the `kind` way; returns what was crashed (empty if nothing)."""
        if a in self.held or not self.world.procs[a].alive:
            return []
        faults = f"{self.process}-faults"  # its own process: a crash runs restarts of its own
        self.history.invoke(faults, "crash", {"group": self.name, "agent": a, "kind": kind})
        try:
            happened, details = {KILL: self._kill, AFTER_BLOB: self._after_blob, AFTER_COMMIT: self._after_commit,
                                 MID_ROLLBACK: self._mid_rollback, ZOMBIE: self._zombie}[kind](a)
        except Exception as exc:  # a harness problem: recorded, and the agent is killed plainly
            self.world.procs[a].kill()
            happened, details = KILL, {"error": f"{type(exc).__name__}: {exc}"}
        if happened != kind:
            self.fallbacks[kind] += 1
        self.crashes[happened] += 1
        self.history.complete(faults, OK, {"happened": happened, **details})
        victim = details.get("victim", a)
        if happened != ZOMBIE:
            self.held.add(victim)
        return [f"{self.name}/{victim}:{happened}"]

    def _kill(self, a: str) -> tuple[str, dict[str, Any]]:
        proc = self.world.procs[a]
        pid = proc.proc.pid if proc.proc else None
        proc.kill()
        return KILL, {"pid": pid}

    def _armed(self, a: str, fault: str, trigger: Callable[[], None]) -> tuple[str, dict[str, Any]]:
        """Arm the fault, pull the trigger, wait for the process to die; else kill it."""
        proc = self.world.procs[a]
        try:
            proc.request("arm", fault=fault)
        except (AgentDied, RuntimeError) as exc:
            return self._fallback(a, f"could not arm it: {exc}")
        try:
            trigger()
        except AgentDied:
            pass
        except RuntimeError as exc:  # e.g. no leader in time: the hook did not fire
            return self._fallback(a, str(exc))
        end = time.monotonic() + HOOK_WAIT_S
        while proc.alive and time.monotonic() < end:
            time.sleep(0.05)
        if proc.alive:
            return self._fallback(a, f"{fault} did not fire within {HOOK_WAIT_S:.0f}s")
        proc.kill()  # reap it
        return fault, {"exit": proc.proc.returncode if proc.proc else None}

    def _fallback(self, a: str, why: str) -> tuple[str, dict[str, Any]]:
        _, details = self._kill(a)
        return KILL, {**details, "fallback": why}

    def _after_blob(self, a: str) -> tuple[str, dict[str, Any]]:
        return self._armed(a, AFTER_BLOB, lambda: self.world.procs[a].request("checkpoint"))

    def _after_commit(self, a: str) -> tuple[str, dict[str, Any]]:
        if not self.world.coordinated:
            return self._armed(a, AFTER_COMMIT, lambda: self.world.procs[a].request("checkpoint"))
        return self._armed(a, AFTER_COMMIT, lambda: self._epoch_for(a))  # its order thread cuts and commits

    def _epoch_for(self, a: str) -> None:
        """An open epoch that `a` has still to cut: a new one, or the one already open."""
        started = self._admin("start_epoch", "StartEpoch", pb.StartEpochRequest(request_id=self._rid("epoch"),
                                                                               group=self.name), {})
        if started.ok:
            return
        info = self._admin("get_group", "GetGroup", pb.GetGroupRequest(group=self.name), {})
        if info.ok:
            g = info.response.group
            for e in info.response.recent_epochs:
                if e.epoch == g.current_epoch and e.state == pb.EPOCH_STARTED and a not in e.committed:
                    return
        raise RuntimeError(f"no epoch for {a} to cut: {started.error}")

    def _mid_rollback(self, a: str) -> tuple[str, dict[str, Any]]:
        """Another agent's crash and restart must roll the victim back; the victim dies in
        that rollback. The victim is `a` if some other agent's failure reaches it, else
        another agent some failure reaches (what-if decides), else `a` is killed plainly."""
        pair = self._rollback_pair(a)
        if pair is None:
            return self._fallback(a, "no other agent's failure rolls it back")
        victim, helper = pair

        def trigger() -> None:
            self.history.note(self.process, "helper-crash", {"group": self.name, "agent": helper, "for": victim})
            self.world.procs[helper].kill()
            if not self._restart(helper, f"to roll {victim} back"):
                raise RuntimeError(f"helper {helper} did not restart")

        happened, details = self._armed(victim, MID_ROLLBACK, trigger)
        if victim != a:
            self.held.add(victim)
        return happened, {**details, "victim": victim, "helper": helper}

    def _rollback_pair(self, a: str) -> tuple[str, str] | None:
        """(victim, helper): the helper's failure rolls the victim back."""
        others: list[tuple[str, str]] = []
        for b in self.world.rng.sample(self.crashable(), len(self.crashable())):
            whatif = self._admin("what_if", "WhatIf", pb.WhatIfRequest(group=self.name, failed=[b]), {"failed": [b]},
                                 lambda r: {"targets": {t.agent_id: t.checkpoint_index for t in r.targets}})
            targets = {t.agent_id for t in whatif.response.targets} if whatif.ok else set()
            if b != a and a in targets:
                return a, b
            others += [(v, b) for v in sorted(targets) if v != b and v in self.crashable()]
        return others[0] if others else None

    def _zombie(self, a: str) -> tuple[str, dict[str, Any]]:
        """A replacement registers; the old process keeps trying to write."""
        self.world.ingest([a])  # the successor reads the journal on from here
        old = self.world.procs[a]
        new = old.successor()
        self.world.procs[a] = new
        if not self._restart(a, "replacement (the old process lives on)"):
            old.kill()
            return KILL, {"fallback": "the replacement did not start"}
        zproc = f"{self.process}-zombie"
        to = self.world.rng.choice([b for b in self.ids if b != a])
        try:
            reply = self._call(a, "zombie-send", {"to": to}, lambda: old.request("send", to=to), process=zproc)
            if reply["envelope"]:
                m = self.ledger.sent(id=reply["id"], sender=a, receiver=to, amount=reply["amount"],
                                     interval=reply["interval"], generation=reply["generation"],
                                     envelope=reply["envelope"], zombie=True)
                self.world.network.put(m, time.monotonic())
                self.zombie["sends"] += 1
        except (AgentDied, RuntimeError):
            pass
        self.zombie["writes"] += 1
        try:
            reply = self._call(a, "zombie-checkpoint", {}, lambda: old.request("checkpoint"), process=zproc)
            self.zombie["accepted"] += 1
            self.zombie_findings.append(Finding("zombie", f"{self.name}/{a}: the old incarnation's checkpoint "
                                                          f"{reply.get('index')} was accepted after its replacement "
                                                          f"registered"))
        except RuntimeError as exc:
            self.zombie["refused" if _definite(str(exc)) else "unknown"] += 1
        except AgentDied:
            self.zombie["unknown"] += 1
        old.kill()
        return ZOMBIE, {"replacement_pid": new.proc.pid if new.proc else None}

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
                info = self._group_info()
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
        for _ in range(3):
            if self._gc_pending is None:
                break
            self._gc()
        if self._gc_pending is not None:
            self.gc_unknown += 1

    def check_checkpoints(self) -> None:
        """Every acknowledged checkpoint not rolled below nor collected is still listed,
        with its digest, and its blob still reads back to that digest."""
        if self.config.plant == PLANT_LOSE_BLOB:
            standing, _ = self.ledger.standing(self.collected)
            if standing:
                self.blobs.delete(standing[-1].uri)
        standing, counts = self.ledger.standing(self.collected)
        listing = self._list()
        if listing is None:
            self.problems.append(f"{self.name}: no final ListCheckpoints answered")
            listing = []
        listed = {(m.agent_id, m.index): m for m in listing}
        counts.update(listed_and_readable=0, gc_outcome_unknown=self.gc_unknown)
        for cp in standing:
            where = f"{self.name}/{cp.agent} checkpoint {cp.index}"
            meta = listed.get((cp.agent, cp.index))
            if meta is None or (meta.blob_uri, meta.sha256) != (cp.uri, cp.sha256):
                if self.gc_unknown:
                    counts["possibly_collected"] = counts.get("possibly_collected", 0) + 1
                    continue
                self.checkpoint_findings.append(Finding("checkpoints", f"{where} was acknowledged with "
                                                        f"{cp.sha256[:12]} and is " + ("not listed" if meta is None else
                                                        f"listed with {meta.sha256[:12]}")))
                continue
            try:
                data = self.blobs.get(cp.uri)
            except BlobError as exc:
                self.checkpoint_findings.append(Finding("checkpoints", f"{where}: its blob cannot be read: {exc}"))
                continue
            if hashlib.sha256(data).hexdigest() != cp.sha256:
                self.checkpoint_findings.append(Finding("checkpoints", f"{where}: its blob does not match its digest"))
                continue
            counts["listed_and_readable"] += 1
        self.checkpoint_counts = counts

    def stop_agents(self) -> None:
        for proc in self.world.procs.values():
            proc.stop(5)
