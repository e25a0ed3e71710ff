"""Leader-only background work: lease expiry and epoch scheduling.

It never writes state: it reads, asks core.decisions what is due, and proposes
the commands like any client would, so a deposed leader's proposals simply fail.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from coordinator.api.v1 import log_pb2
from coordinator.core.commands import AbortEpoch, Command, DeclareAgentFailed, RecoveryResult, StartEpoch
from coordinator.core.decisions import epoch_commands
from coordinator.observability import metrics
from coordinator.transport.leases import LeaseTable
from coordinator.transport.proposer import Proposer

log = logging.getLogger(__name__)
PERIOD_S = 0.25


def _entry(command: Command) -> log_pb2.LogEntry:
    entry = log_pb2.LogEntry(request_id=f"leader-{uuid.uuid4().hex}", proposed_at=time.time())
    if isinstance(command, DeclareAgentFailed):
        entry.declare_agent_failed.CopyFrom(log_pb2.DeclareAgentFailed(
            group=command.group, agent_id=command.agent_id, incarnation=command.incarnation))
    elif isinstance(command, AbortEpoch):
        entry.abort_epoch.CopyFrom(log_pb2.AbortEpoch(group=command.group, epoch=command.epoch, reason=command.reason))
    elif isinstance(command, StartEpoch):
        entry.start_epoch.group = command.group
        entry.start_epoch.request_id = entry.request_id
    return entry


async def run(proposer: Proposer, leases: LeaseTable, stop: asyncio.Event) -> None:
    node = proposer.node
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PERIOD_S)
            break
        except asyncio.TimeoutError:
            pass
        if not node.is_leader():
            leases.term_granted = None
            continue
        try:
            await _tick(proposer, leases)
        except Exception:  # a failed proposal is retried on the next tick
            log.warning("leader loop tick failed", exc_info=True)


async def _tick(proposer: Proposer, leases: LeaseTable) -> None:
    node = proposer.node
    term = node.status().term
    if leases.term_granted != term:
        await proposer.barrier(None)  # see everything the previous leader committed
        state = node.read_state()
        leases.grant_all(term, state.groups(), state.agents)
        return
    due: list[Command] = list(leases.expired())
    state = node.read_state()
    now = time.time()
    for group in state.groups():
        current = state.epoch(group.spec.name, group.current_epoch) if group.current_epoch else None
        due += epoch_commands(group, current, now)
    for command in due:
        result = await proposer.propose(None, _entry(command))
        if isinstance(command, DeclareAgentFailed) and isinstance(result, RecoveryResult) and result.targets:
            metrics.RECOVERIES.inc()
            for target in result.targets:
                metrics.ROLLBACK_DEPTH.observe(target.intervals_lost)
            log.info("agent failed; recovery line computed", extra={"group": command.group, "agent": command.agent_id,
                     "targets": [(t.agent_id, t.checkpoint_index) for t in result.targets]})
        elif isinstance(command, AbortEpoch):
            metrics.EPOCHS.labels("aborted").inc()
        elif isinstance(command, StartEpoch):
            metrics.EPOCHS.labels("started").inc()
