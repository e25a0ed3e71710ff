"""Leader-only background work: lease expiry and epoch scheduling.

It never writes state: it reads, asks core.decisions what is due, and proposes
the commands like any client would, so a deposed leader's proposals simply fail.
Before expiring leases it checks the leader itself (service.stall_watch): in a
window it lagged too much to have heard keepalives, no agent is declared failed
and every lease is extended by the window.
"""
from __future__ import annotations

import asyncio
import logging
import uuid

from coordinator.core.commands import AbortEpoch, Command, DeclareAgentFailed, Entry, RecoveryResult, StartEpoch
from coordinator.core.decisions import epoch_commands
from coordinator.observability import metrics
from coordinator.replication.batcher import Batcher
from coordinator.service import ticks
from coordinator.service.leases import LeaseTable
from coordinator.service.stall_watch import StallWatch

log = logging.getLogger(__name__)
PERIOD_S = 0.25


def _entry(command: Command) -> Entry:
    return Entry(f"leader-{uuid.uuid4().hex}", 0.0, command)


async def run(batcher: Batcher, leases: LeaseTable, stop: asyncio.Event, watch: StallWatch) -> None:
    node = batcher.replica
    async for _ in ticks.every(PERIOD_S, stop):
        batcher.clock.now()  # read every tick, leading or not: a step while following is then seen as one
        if not node.is_leader():
            leases.term_granted = None
            watch.reset()
            _publish_live_agents({})
            continue
        try:
            await _tick(batcher, leases, watch)
        except Exception:  # a failed proposal is retried on the next tick
            log.warning("leader loop tick failed", exc_info=True)


def _publish_live_agents(by_lease: dict[str, int]) -> None:
    """The leader's lease table in the gauge; zeros on a follower (it holds no leases)."""
    for lease in metrics.LEASE_KINDS:
        metrics.LIVE_AGENTS.labels(lease).set(by_lease.get(lease, 0))


async def _tick(batcher: Batcher, leases: LeaseTable, watch: StallWatch) -> None:
    node = batcher.replica
    term = node.status().term
    if leases.term_granted != term:
        await batcher.barrier()  # see everything the previous leader committed
        state = node.read_state()
        batcher.clock.catch_up(state.dedupe_clock().clock_ms / 1000)
        leases.grant_all(term, state.groups(), state.agents)
        watch.reset()
        return
    credit = watch.credit()
    if credit > 0:
        leases.credit(credit)
        metrics.LEASE_CREDIT_SECONDS.inc(credit)
        log.info("leader lagging: %.2fs credited to every lease, no failure declared this tick", credit)
    due: list[Command] = [] if credit > 0 else list(leases.expired())
    _publish_live_agents(leases.live_by_lease())
    state = node.read_state()
    now = batcher.clock.now()
    for group in state.groups():
        current = state.epoch(group.spec.name, group.current_epoch) if group.current_epoch else None
        due += epoch_commands(group, current, now)
    for command in due:
        result = await batcher.propose(_entry(command))
        # The failed agent is always among the targets: none means it was no longer live.
        if isinstance(command, DeclareAgentFailed) and isinstance(result, RecoveryResult) and result.targets:
            metrics.AGENTS_DECLARED_FAILED.inc()
            metrics.RECOVERIES.inc()
            for target in result.targets:
                metrics.ROLLBACK_DEPTH.observe(target.intervals_lost)
            log.info("agent failed; recovery line computed", extra={"group": command.group, "agent": command.agent_id,
                     "targets": [(t.agent_id, t.checkpoint_index) for t in result.targets]})
        elif isinstance(command, AbortEpoch):
            metrics.EPOCHS.labels("aborted").inc()
        elif isinstance(command, StartEpoch):
            metrics.EPOCHS.labels("started").inc()
