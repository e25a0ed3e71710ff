"""What the leader-only services should propose, decided purely from state and a time.

The loops in coordinator/service only read state, call these, and propose the
commands; keeping the decisions here makes them deterministic and testable
without a cluster or a clock.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from coordinator.core.commands import AbortEpoch, Command, DeclareAgentFailed, StartEpoch
from coordinator.core.epochs import epoch_interval
from coordinator.core.model import Epoch, EpochState, Group, GroupState, Mode


@dataclass(frozen=True)
class Lease:
    incarnation: int
    expires_at: float
    ttl_s: float  # the group's lease TTL when it was renewed: what a released hold grants again


# Per lease key held by open agent sessions: each held incarnation, and when a frame on
# one of its sessions last proved it live (the leader's monotonic time).
Holds = Mapping[tuple[str, str], Mapping[int, float]]
NO_HOLDS: Holds = {}
# A hold keeps a lease only while a frame proved its incarnation within this many TTLs.
# Its connection's pings are answered by the client's gRPC threads, even when the agent's
# own code is stuck (a blocked event loop, a deadlock); its keepalives, once a TTL, are
# not, and an agent that stops proving itself is failed as if it had no session. Three
# TTLs leave a loaded leader room to read them late.
HOLD_PROOF_TTLS = 3.0


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


def expired_leases(leases: dict[tuple[str, str], Lease], now: float,
                   held: Holds = NO_HOLDS) -> list[DeclareAgentFailed]:
    """Agents whose lease ran out, in key order; the state machine ignores a stale
    incarnation. Filtered before sorted: the leader runs this every quarter second over
    every lease, and sorting thousands of live ones each time was a tenth of its CPU.

    A lease `held` by an open session of the same incarnation does not run out while a
    frame proved that incarnation within HOLD_PROOF_TTLS TTLs: the session's connection
    is proved alive by HTTP/2 pings, without any frame, so a leader too loaded to read
    frames on time cannot blame the agent. Such a lease is moved a TTL on here, so that
    it is not looked at again every quarter second (at 10,000 held leases that was 4 %
    of the leader's CPU); when its session ends it runs a whole TTL from then
    (release_hold)."""
    declared = []
    for key, lease in [(key, lease) for key, lease in leases.items() if lease.expires_at <= now]:
        proved_at = held.get(key, {}).get(lease.incarnation)
        if proved_at is not None and now - proved_at < HOLD_PROOF_TTLS * lease.ttl_s:
            leases[key] = replace(lease, expires_at=now + lease.ttl_s)
        else:
            declared.append((key, lease))
    return [DeclareAgentFailed(group, agent, lease.incarnation) for (group, agent), lease in sorted(declared)]


def renew(leases: dict[tuple[str, str], Lease], group: Group, agent_id: str, incarnation: int, now: float) -> Lease:
    lease = Lease(incarnation, now + group.spec.lease_ttl_s, group.spec.lease_ttl_s)
    leases[(group.spec.name, agent_id)] = lease
    return lease


def release_hold(leases: dict[tuple[str, str], Lease], key: tuple[str, str], incarnation: int, now: float) -> None:
    """The last session holding this incarnation's lease ended: its agent gets a whole TTL
    from now to come back (a client re-opens its session after a broken connection or a
    leader change), as if its last keepalive had been heard now. A lease that now belongs
    to another incarnation, or to none (the agent left or was declared failed), stays as it is."""
    lease = leases.get(key)
    if lease is not None and lease.incarnation == incarnation:
        leases[key] = replace(lease, expires_at=max(lease.expires_at, now + lease.ttl_s))


def extend(leases: dict[tuple[str, str], Lease], by_s: float) -> None:
    """Every lease `by_s` seconds longer: the window in which the leader could not have
    heard keepalives (core.overload.stall_credit) is not counted against any agent."""
    if by_s > 0:
        for key, lease in leases.items():
            leases[key] = replace(lease, expires_at=lease.expires_at + by_s)


def forget(leases: dict[tuple[str, str], Lease], keys: Iterable[tuple[str, str]]) -> None:
    for key in keys:
        leases.pop(key, None)
