"""Run N agents exchanging messages under one checkpointing protocol, then measure.

Deterministic for a seed: one Random drives topology choices, message delays and
checkpoint phases. The resulting History goes through the same recovery-line code
the coordinator uses, so the numbers are what a real group would see.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from coordinator.core import cic
from coordinator.core import recovery_line as rl
from coordinator.core.history import EventLog, History

PROTOCOLS = ("none", "coordinated", "bcs", "hmnr", "fdas")
TOPOLOGIES = ("random", "ring", "star", "pipeline")


def neighbours(topology: str, n: int) -> Callable[[int, random.Random], int | None]:
    """Who agent i may send to next."""
    if topology == "random":
        return lambda i, rng: rng.choice([j for j in range(n) if j != i])
    if topology == "ring":
        return lambda i, rng: (i + 1) % n
    if topology == "star":
        return lambda i, rng: rng.randrange(1, n) if i == 0 else 0
    if topology == "pipeline":
        return lambda i, rng: i + 1 if i + 1 < n else None
    raise ValueError(f"unknown topology {topology!r}; choose from {', '.join(TOPOLOGIES)}")


@dataclass(frozen=True)
class SimResult:
    protocol: str
    agents: int
    messages: int
    basic: int
    forced: int
    useless: int
    rollback: float  # checkpoints (or volatile states) undone per failure, averaged over every single failure

    @property
    def forced_per_basic(self) -> float:
        return self.forced / self.basic if self.basic else 0.0


@dataclass
class _Agent:
    index: int
    last: int = 0
    epoch: int = 0
    bcs: cic.BcsState | None = None
    fdas: cic.FdasState | None = None
    hmnr: cic.HmnrState | None = None


def simulate(agents: int, topology: str, protocol: str, steps: int, message_rate: float, basic_interval: int,
             seed: int) -> SimResult:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    if agents < 2 or steps < 1 or basic_interval < 1 or not 0 < message_rate <= 1:
        raise ValueError("need agents >= 2, steps >= 1, basic_interval >= 1 and 0 < message_rate <= 1")
    rng = random.Random(seed)
    pick = neighbours(topology, agents)
    names = [f"p{i}" for i in range(agents)]
    log = EventLog(names)
    state = [_Agent(i, bcs=cic.BcsState(), fdas=cic.FdasState.create(i, agents), hmnr=cic.HmnrState.create(i, agents))
             for i in range(agents)]
    phase = [rng.randrange(basic_interval) for _ in range(agents)]
    in_flight: list[tuple[int, int, int, str, bytes, int]] = []  # (arrival, sender, receiver, id, piggyback, epoch)
    counts = {"basic": 0, "forced": 0, "messages": 0}

    def checkpoint(a: _Agent, forced_index: int | None = None, *, forced: bool) -> None:
        if protocol == "bcs":
            index = cic.bcs_on_checkpoint(a.bcs, forced_index)
        elif protocol == "coordinated":
            index = a.epoch
        else:
            index = a.last + 1
        if protocol == "fdas":
            cic.fdas_on_checkpoint(a.fdas)
        elif protocol == "hmnr":
            cic.hmnr_on_checkpoint(a.hmnr)
        log.checkpoint(names[a.index], index)
        a.last = index
        counts["forced" if forced else "basic"] += 1

    for step in range(steps):
        if protocol == "coordinated":
            if step and step % basic_interval == 0:
                epoch = step // basic_interval
                for a in state:
                    if a.epoch < epoch:
                        a.epoch = epoch
                        checkpoint(a, forced=False)
        else:
            for a in state:
                if (step + phase[a.index]) % basic_interval == basic_interval - 1:
                    checkpoint(a, forced=False)
        for a in state:
            if rng.random() < message_rate:
                to = pick(a.index, rng)
                if to is None:
                    continue
                mid = f"m{counts['messages']}"
                counts["messages"] += 1
                log.send(names[a.index], mid)
                piggyback = (cic.bcs_on_send(a.bcs) if protocol == "bcs"
                             else cic.fdas_on_send(a.fdas) if protocol == "fdas"
                             else cic.hmnr_on_send(a.hmnr, to) if protocol == "hmnr" else b"")
                in_flight.append((step + rng.randint(1, 3), a.index, to, mid, piggyback, a.epoch))
        arrived = [m for m in in_flight if m[0] <= step]
        in_flight = [m for m in in_flight if m[0] > step]
        for _, frm, to, mid, piggyback, epoch in arrived:
            r = state[to]
            if protocol == "bcs":
                forced_index = cic.bcs_forced_index(r.bcs, piggyback)
                if forced_index is not None:
                    checkpoint(r, forced_index, forced=True)
            elif protocol == "hmnr":
                if cic.hmnr_must_checkpoint(r.hmnr, frm, piggyback):
                    checkpoint(r, forced=True)
                cic.hmnr_on_deliver(r.hmnr, frm, piggyback)
            elif protocol == "fdas":
                if cic.fdas_must_checkpoint(r.fdas, piggyback):
                    checkpoint(r, forced=True)
                cic.fdas_on_deliver(r.fdas, piggyback)
            elif protocol == "coordinated" and cic.epoch_forces_cut(r.epoch, epoch):
                r.epoch = epoch
                checkpoint(r, forced=True)
            log.receive(names[to], mid)
    history = log.history()
    return SimResult(protocol, agents, counts["messages"], counts["basic"], counts["forced"],
                     len(rl.useless_checkpoints(history)), _mean_rollback(history))


def _mean_rollback(history: History) -> float:
    """Per single failure, how many checkpoints (counting the volatile state as one)
    the whole group loses; averaged over every agent failing in turn."""
    total = 0
    for failed in history.checkpoints:
        cut = rl.recovery_line(history, {failed}).cut
        for agent, c in cut.items():
            if c is not None:
                total += 1 + sum(1 for idx in history.checkpoints[agent] if idx > c)
    return total / len(history.checkpoints)
