"""The agent crashes the nemesis injects into one group, each set up to land where it should.

Crash kinds (the victim ends up dead, except a zombie, whose replacement is already
running):
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

import time
from collections import Counter
from typing import Any, Callable

from chaos.history import OK
from chaos.tokens.agent import AFTER_BLOB, AFTER_COMMIT, MID_ROLLBACK
from chaos.tokens.ledger import Finding
from chaos.tokens.process import AgentDied
from chaos.tokens.traffic import TokenGroup
from chaos.workloads.group_calls import GroupCalls, definite
from coordinator.api.v1 import coordinator_pb2 as pb

KILL, ZOMBIE = "kill", "zombie"
CRASH_KINDS = (KILL, AFTER_BLOB, AFTER_COMMIT, MID_ROLLBACK, ZOMBIE)
HOOK_WAIT_S = 10.0  # an armed crash that needs the coordinator gets this long to fire

Crashed = tuple[str, dict[str, Any]]  # the kind that really happened, and its details for the history


class AgentCrashes:
    def __init__(self, world: TokenGroup, calls: GroupCalls, *, restart: Callable[[str, str], bool],
                 crashable: Callable[[], list[str]]) -> None:
        """`restart(agent, why)`: start the agent again, False if it did not come up;
        `crashable()`: the agents a crash may still pick."""
        self.world, self.calls = world, calls
        self._restart, self._crashable = restart, crashable
        self.by_kind: Counter[str] = Counter()  # by the kind that really happened
        self.fallbacks: Counter[str] = Counter()  # kinds that could not be set up and became kills
        self.zombie: Counter[str] = Counter()  # what the zombies' writes came to
        self.zombie_findings: list[Finding] = []

    @property
    def group(self) -> str:
        return self.calls.group

    def crash(self, a: str, kind: str) -> tuple[str, str]:
        """Crash agent `a` the `kind` way: (the kind that happened, the agent it happened to)."""
        faults = f"{self.calls.process}-faults"  # its own process: a crash runs restarts of its own
        self.calls.history.invoke(faults, "crash", {"group": self.group, "agent": a, "kind": kind})
        try:
            happened, details = {KILL: self._kill, AFTER_BLOB: self._after_blob, AFTER_COMMIT: self._after_commit,
                                 MID_ROLLBACK: self._mid_rollback, ZOMBIE: self._zombie}[kind](a)
        except Exception as exc:  # a harness problem: recorded, and the agent is killed plainly
            self.world.procs[a].kill()
            happened, details = KILL, {"error": f"{type(exc).__name__}: {exc}"}
        if happened != kind:
            self.fallbacks[kind] += 1
        self.by_kind[happened] += 1
        self.calls.history.complete(faults, OK, {"happened": happened, **details})
        return happened, details.get("victim", a)

    def _kill(self, a: str) -> Crashed:
        proc = self.world.procs[a]
        pid = proc.proc.pid if proc.proc else None
        proc.kill()
        return KILL, {"pid": pid}

    def _armed(self, a: str, fault: str, trigger: Callable[[], None]) -> Crashed:
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

    def _fallback(self, a: str, why: str) -> Crashed:
        _, details = self._kill(a)
        return KILL, {**details, "fallback": why}

    def _after_blob(self, a: str) -> Crashed:
        return self._armed(a, AFTER_BLOB, lambda: self.world.procs[a].request("checkpoint"))

    def _after_commit(self, a: str) -> Crashed:
        if not self.world.coordinated:
            return self._armed(a, AFTER_COMMIT, lambda: self.world.procs[a].request("checkpoint"))
        return self._armed(a, AFTER_COMMIT, lambda: self._epoch_for(a))  # its order thread cuts and commits

    def _epoch_for(self, a: str) -> None:
        """An open epoch that `a` has still to cut: a new one, or the one already open."""
        started = self.calls.start_epoch(keep_answer=False)
        if started.ok:
            return
        info = self.calls.group_info(keep_answer=False)
        if info.ok:
            g = info.response.group
            for e in info.response.recent_epochs:
                if e.epoch == g.current_epoch and e.state == pb.EPOCH_STARTED and a not in e.committed:
                    return
        raise RuntimeError(f"no epoch for {a} to cut: {started.error}")

    def _mid_rollback(self, a: str) -> Crashed:
        """Another agent's crash and restart must roll the victim back; the victim dies in
        that rollback. The victim is `a` if some other agent's failure reaches it, else
        another agent some failure reaches (what-if decides), else `a` is killed plainly."""
        pair = self._rollback_pair(a)
        if pair is None:
            return self._fallback(a, "no other agent's failure rolls it back")
        victim, helper = pair

        def trigger() -> None:
            self.calls.history.note(self.calls.process, "helper-crash",
                                    {"group": self.group, "agent": helper, "for": victim})
            self.world.procs[helper].kill()
            if not self._restart(helper, f"to roll {victim} back"):
                raise RuntimeError(f"helper {helper} did not restart")

        happened, details = self._armed(victim, MID_ROLLBACK, trigger)
        return happened, {**details, "victim": victim, "helper": helper}

    def _rollback_pair(self, a: str) -> tuple[str, str] | None:
        """(victim, helper): the helper's failure rolls the victim back."""
        others: list[tuple[str, str]] = []
        for b in self.world.rng.sample(self._crashable(), len(self._crashable())):
            whatif = self.calls.call("what_if", "WhatIf", pb.WhatIfRequest(group=self.group, failed=[b]),
                                     {"failed": [b]},
                                     lambda r: {"targets": {t.agent_id: t.checkpoint_index for t in r.targets}})
            targets = {t.agent_id for t in whatif.response.targets} if whatif.ok else set()
            if b != a and a in targets:
                return a, b
            others += [(v, b) for v in sorted(targets) if v != b and v in self._crashable()]
        return others[0] if others else None

    def _zombie(self, a: str) -> Crashed:
        """A replacement registers; the old process keeps trying to write."""
        self.world.ingest([a])  # the successor reads the journal on from here
        old = self.world.procs[a]
        new = old.successor()
        self.world.procs[a] = new
        if not self._restart(a, "replacement (the old process lives on)"):
            old.kill()
            return KILL, {"fallback": "the replacement did not start"}
        zproc = f"{self.calls.process}-zombie"
        to = self.world.rng.choice([b for b in self.world.ids if b != a])
        try:
            reply = self.calls.agent(a, "zombie-send", {"to": to}, lambda: old.request("send", to=to), process=zproc)
            if reply["envelope"]:
                m = self.world.ledger.sent(id=reply["id"], sender=a, receiver=to, amount=reply["amount"],
                                           interval=reply["interval"], generation=reply["generation"],
                                           envelope=reply["envelope"], zombie=True)
                self.world.network.put(m, time.monotonic())
                self.zombie["sends"] += 1
        except (AgentDied, RuntimeError):
            pass
        self.zombie["writes"] += 1
        try:
            reply = self.calls.agent(a, "zombie-checkpoint", {}, lambda: old.request("checkpoint"), process=zproc)
            self.zombie["accepted"] += 1
            self.zombie_findings.append(Finding("zombie", f"{self.group}/{a}: the old incarnation's checkpoint "
                                                          f"{reply.get('index')} was accepted after its replacement "
                                                          f"registered"))
        except RuntimeError as exc:
            self.zombie["refused" if definite(str(exc)) else "unknown"] += 1
        except AgentDied:
            self.zombie["unknown"] += 1
        old.kill()
        return ZOMBIE, {"replacement_pid": new.proc.pid if new.proc else None}


__all__ = ["CRASH_KINDS", "KILL", "ZOMBIE", "AgentCrashes"]
