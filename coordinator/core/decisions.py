"""What the leader-only services should propose, decided purely from state and a time.

The loops in coordinator/service only read state, call these, and propose the
commands; keeping the decisions here makes them deterministic and testable
without a cluster or a clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from coordinator.core.commands import AbortEpoch, Command, DeclareAgentFailed, StartEpoch
from coordinator.core.epochs import epoch_interval
from coordinator.core.model import Epoch, EpochState, Group, GroupState, Mode


@dataclass(frozen=True)
class Lease:
    incarnation: int
    expires_at: float


def epoch_commands(group: Group, current: Epoch | None, now: float) -> list[Command]:
    """Abort an open epoch past its deadline; start the next one when the interval is due.

    An aborted epoch leaves the previous stable epoch as the recovery line, so a
    slow or dead member costs one round, never the group.
    """
    if group.spec.mode is not Mode.COORDINATED:
        return []
    if current is not None and current.state is EpochState.STARTED:
        if now >= current.deadline:
            return [AbortEpoch(group.spec.name, current.epoch, f"deadline {current.deadline:.3f} passed")]
        return []
    interval = epoch_interval(group.spec)
    if interval <= 0 or group.state is not GroupState.RUNNING or not group.members:
        return []
    last_start = current.started_at if current is not None else group.created_at
    return [StartEpoch(group.spec.name)] if now >= last_start + interval else []


def expired_leases(leases: Mapping[tuple[str, str], Lease], now: float) -> list[DeclareAgentFailed]:
    """Agents whose lease ran out, in key order; the state machine ignores a stale
    incarnation. Filtered before sorted: the leader runs this every quarter second over
    every lease, and sorting thousands of live ones each time was a tenth of its CPU."""
    due = [(key, lease) for key, lease in leases.items() if lease.expires_at <= now]
    return [DeclareAgentFailed(group, agent, lease.incarnation) for (group, agent), lease in sorted(due)]


def renew(leases: dict[tuple[str, str], Lease], group: Group, agent_id: str, incarnation: int, now: float) -> Lease:
    lease = Lease(incarnation, now + group.spec.lease_ttl_s)
    leases[(group.spec.name, agent_id)] = lease
    return lease


def extend(leases: dict[tuple[str, str], Lease], by_s: float) -> None:
    """Every lease `by_s` seconds longer: the window in which the leader could not have
    heard keepalives (core.overload.stall_credit) is not counted against any agent."""
    if by_s > 0:
        for key, lease in leases.items():
            leases[key] = Lease(lease.incarnation, lease.expires_at + by_s)


def forget(leases: dict[tuple[str, str], Lease], keys: Iterable[tuple[str, str]]) -> None:
    for key in keys:
        leases.pop(key, None)
