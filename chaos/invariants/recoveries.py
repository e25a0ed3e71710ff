"""Recoveries as the history shows them: rollback orders seen, when each happened, why.

A recovery is known by its id (the group's recovery counter). The history shows it
through rollback orders that carry the id (WatchOrders answers), through group
reads and Register answers that report the counter, and -- for a recovery started
by re-registering a live agent -- through that Register's answer. Its rollback
line is only known completely once a read shows the group RUNNING again with the
same counter: every one of its orders was then acknowledged (recovery-ends-after-every-ack
checks that it was), and the workload acknowledges only orders it saw.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from chaos.invariants.facts import INF, EarliestAtLeast, Facts, Req


@dataclass(frozen=True)
class ObservedOrder:
    agent: str
    order_id: int
    checkpoint_index: int
    recovery_id: int
    seen: Req


def rollback_orders(facts: Facts, group: str) -> list[ObservedOrder]:
    out = []
    for watch in facts.of(group, "watch_orders"):
        for o in (watch.answer or {}).get("orders", ()):
            if o["kind"] == "roll_back":
                out.append(ObservedOrder(watch.value["agent"], o["order_id"], o["checkpoint_index"],
                                         o["recovery_id"], watch))
    return out


def recovery_known_by(facts: Facts, group: str) -> EarliestAtLeast:
    """When some answer first proved a recovery (any id at or above the one asked for) had happened."""
    known = EarliestAtLeast()
    for o in facts.observations(group):
        if o.recovery_id:
            known.saw(None, o.recovery_id, o.end, o.req.ok_op)
    for order in rollback_orders(facts, group):
        known.saw(None, order.recovery_id, order.seen.applied_by, order.seen.ok_op)
    return known


@dataclass
class Recovery:
    """One recovery id of a group. `lo`..`hi`: it took effect in between. `line`: the
    rollback targets seen (agents absent were not rolled back, when `complete`)."""

    id: int
    lo: float = 0.0
    hi: float = INF
    line: dict[str, int] = field(default_factory=dict)
    complete: bool = False
    cause: Req | None = None  # the re-registration that started it
    failed: frozenset[str] | None = None  # None: not known from the history
    conflicts: list[tuple[ObservedOrder, ObservedOrder]] = field(default_factory=list)


def recovery_events(facts: Facts, group: str) -> dict[int, Recovery]:
    observations = [o for o in facts.observations(group) if o.recovery_id is not None]
    orders = rollback_orders(facts, group)
    ids = {o.recovery_id for o in observations} | {o.recovery_id for o in orders}
    known_by = recovery_known_by(facts, group)
    events = {r: Recovery(r) for r in ids if r >= 1}
    for r, event in events.items():
        before = [o.start for o in observations if o.recovery_id < r]
        event.lo, event.hi = max(before, default=0.0), known_by.first_at_least(None, r)[0]
        first_of: dict[str, ObservedOrder] = {}
        for o in orders:
            if o.recovery_id == r:
                earlier = first_of.setdefault(o.agent, o)
                if earlier.checkpoint_index != o.checkpoint_index:
                    event.conflicts.append((earlier, o))
        event.line = {a: o.checkpoint_index for a, o in first_of.items()}
        event.complete = any(o.recovery_id == r and o.state == "RUNNING" for o in observations)
    _attribute_causes(facts, group, events)
    return events


def lease_failures(facts: Facts, group: str) -> bool:
    """Whether a read ever showed an agent failed by lease expiry: a recovery the history
    has no re-registration for, which also leaves that agent counted as failed."""
    return any(a["state"] == "AGENT_FAILED" for r in facts.of(group, "get_group") if r.ok
               for a in r.answer["agents"].values())


def re_registrations(facts: Facts, group: str) -> list[Req]:
    """Registrations of an agent registered before: each may have started a recovery."""
    registers = facts.of(group, "register")
    return [req for req in registers
            if any(other.start < req.start and other.may_apply for other in registers
                   if other.value["agent"] == req.value["agent"] and other is not req)]


def _attribute_causes(facts: Facts, group: str, events: dict[int, Recovery]) -> None:
    """A re-registration whose answer reports recovery r, of an agent that recovery r
    rolled back, started r; its window is then the recovery's too. The failed set is
    that agent alone when the previous recovery had certainly finished (the group
    read RUNNING) before it, and no agent was ever seen failed by lease expiry."""
    failures_by_lease = lease_failures(facts, group)
    finished = {o.recovery_id: o.end for o in sorted(facts.observations(group), key=lambda o: o.end, reverse=True)
                if o.recovery_id is not None and o.state == "RUNNING"}
    for req in re_registrations(facts, group):
        if not req.ok or req.answer["recovery_id"] not in events:
            continue
        event, agent = events[req.answer["recovery_id"]], req.value["agent"]
        if agent not in event.line or event.cause is not None:
            continue
        event.cause, event.lo, event.hi = req, max(event.lo, req.start), min(event.hi, req.applied_by)
        previous_done = event.id == 1 or finished.get(event.id - 1, INF) < req.start
        if previous_done and not failures_by_lease:
            event.failed = frozenset({agent})
