"""A node's serving half: the gRPC server and the leader-only loop over one replica.

Both propose through one Batcher, so the leader's own commands share batches
with its clients', and both see one lease table: the servicers renew leases, the
loop proposes their expiries.
"""
from __future__ import annotations

import asyncio
from typing import Iterable

from coordinator.observability import metrics
from coordinator.observability.health_report import HealthReport
from coordinator.replication.batcher import DEFAULT_DEDUPE_WINDOW_S, Batcher
from coordinator.replication.leader_clock import LeaderClock
from coordinator.replication.replica import ClockAgreement, Replica
from coordinator.service import leader_loop
from coordinator.service.leases import LeaseTable
from coordinator.service.stall_watch import StallWatch
from coordinator.transport import server
from coordinator.transport.auth import Authorizer
from coordinator.transport.tls import ServerTLS


async def serve(replica: Replica, address: str, stop: asyncio.Event,
                dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
                limits: server.ServerLimits = server.ServerLimits(), clock: LeaderClock | None = None,
                authorizer: Authorizer | None = None, tls: ServerTLS | None = None,
                known_hosts: Iterable[str] = (), report: HealthReport | None = None) -> None:
    """Serve until `stop` is set; raises OSError at once if `address` cannot be bound.

    The server stops as soon as `stop` is set, without waiting for a leader-loop
    tick that may be waiting for an answer; the loop ends after its tick."""
    clock = clock or LeaderClock(ceiling=replica.agreed_time if isinstance(replica, ClockAgreement) else None)
    metrics.CLOCK_AHEAD_OF_VOTERS.set_function(lambda: clock.ahead_by)
    batcher, leases = Batcher(replica, dedupe_window_s, clock), LeaseTable(clock.monotonic)
    admission = server.gate_for(batcher)
    watch = StallWatch(admission, replica.tick_lag_since, leader_loop.PERIOD_S)
    async with server.running(batcher, leases, address, limits, admission, authorizer, tls, known_hosts,
                                     report):
        loop = asyncio.create_task(leader_loop.run(batcher, leases, stop, watch))
        await stop.wait()
    await loop
