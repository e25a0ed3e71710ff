"""Invariant: a group runs again after a recovery only once every rollback order of it was acknowledged.

The state machine puts a group in RECOVERING with recovery id r and queues one
rollback order per agent rolled back; it returns the group to RUNNING when an
AckOrder removes the last outstanding rollback order. While the counter stays r,
only an AckOrder removes an order of r: a failed agent's or a re-registered agent's
order is superseded by the next recovery, which raises the counter; a deregistered
agent's order stays outstanding. So a state RUNNING at counter r comes after an
applied AckOrder of every order of r. The other invariants (recovery lines, reads,
durability) take a RUNNING read at r to mean that the orders seen of r were all of
them (recoveries.py); this checks that it also means they were all acknowledged.

What shows the group RUNNING at r:
- a GetGroup answer with state RUNNING and recovery id r;
- an AckOrder answer (the group's state right after it) of an order of r, when the
  counter is pinned at r for it: recovery r was known to have happened before the
  acknowledgement was sent, and an answer reporting a counter at or below r was
  sent after the acknowledgement returned.

The rule, in real time: such an answer took effect at the latest when it returned,
and an acknowledgement took effect at the earliest when it was first sent. So for
every order of r the history saw (WatchOrders answers), some AckOrder of that order
that may have been applied (answered, or of unknown outcome; not refused) must have
been sent before the answer returned. An acknowledgement still in flight counts: it
may have been applied first. Only an order nobody had begun to acknowledge when the
group was seen RUNNING is a violation. The earliest-returning such answer of each
recovery is judged; any later one is sent no earlier and passes if it does.

Only the metadata workload's groups are judged: the agent workload's agents
acknowledge their orders themselves, and those calls are not in the history.
"""
from __future__ import annotations

from dataclasses import dataclass

from chaos.invariants.facts import INF, Facts, Req
from chaos.invariants.recoveries import ObservedOrder, recovery_known_by, rollback_orders
from chaos.report import InvariantResult

NAME = "recovery-ends-after-every-ack"
RUNNING = "RUNNING"


@dataclass(frozen=True)
class RunningSeen:
    """An answer that shows the group RUNNING at recovery id `recovery_id`."""

    req: Req
    recovery_id: int

    @property
    def end(self) -> float:
        return self.req.applied_by


def check(facts: Facts) -> InvariantResult:
    result = InvariantResult(NAME, True)
    counts = dict.fromkeys(("recoveries_judged", "multi_order", "orders_judged", "by_read", "by_ack",
                            "not_seen_running", "unacknowledged"), 0)
    for group in facts.groups:
        orders = _orders_by_recovery(rollback_orders(facts, group))
        first = _first_running(facts, group, orders)
        acks = _first_acks(facts, group)
        for r, by_id in sorted(orders.items()):
            seen = first.get(r)
            if seen is None:
                counts["not_seen_running"] += 1
                continue
            counts["recoveries_judged"] += 1
            counts["multi_order"] += len(by_id) > 1
            counts["by_ack" if seen.req.f == "ack_order" else "by_read"] += 1
            counts["orders_judged"] += len(by_id)
            for order_id, order in sorted(by_id.items()):
                ack = acks.get(order_id)
                if ack is None or ack.start > seen.end:
                    counts["unacknowledged"] += 1
                    how = "never acknowledged" if ack is None else f"first acknowledged at {ack.start:.3f}s"
                    result.violate(f"{group}: recovery {r} seen RUNNING (answer returned at {seen.end:.3f}s) before "
                                   f"its rollback order {order_id} to {order.agent} was acknowledged ({how})",
                                   order.seen.ok_op, seen.req.first.invoke, seen.req.ok_op,
                                   ack.first.invoke if ack is not None else None)
    result.counts = counts
    return result


def _orders_by_recovery(orders: list[ObservedOrder]) -> dict[int, dict[int, ObservedOrder]]:
    """Each recovery's orders by id, each as first seen."""
    out: dict[int, dict[int, ObservedOrder]] = {}
    for o in sorted(orders, key=lambda o: o.seen.applied_by):
        out.setdefault(o.recovery_id, {}).setdefault(o.order_id, o)
    return out


def _first_acks(facts: Facts, group: str) -> dict[int, Req]:
    """Per order id, the first-sent acknowledgement that may have been applied."""
    first: dict[int, Req] = {}
    for ack in facts.of(group, "ack_order"):  # by first send
        if ack.may_apply:
            first.setdefault(ack.value["order_id"], ack)
    return first


def _first_running(facts: Facts, group: str,
                   orders: dict[int, dict[int, ObservedOrder]]) -> dict[int, RunningSeen]:
    """Per recovery id, the earliest-returning answer that shows the group RUNNING at it."""
    seen = [RunningSeen(o.req, o.recovery_id) for o in facts.observations(group)
            if o.req.f == "get_group" and o.state == RUNNING and o.recovery_id]
    seen += _running_acks(facts, group, orders)
    first: dict[int, RunningSeen] = {}
    for s in sorted(seen, key=lambda s: s.end):
        first.setdefault(s.recovery_id, s)
    return first


def _running_acks(facts: Facts, group: str, orders: dict[int, dict[int, ObservedOrder]]) -> list[RunningSeen]:
    """AckOrder answers saying RUNNING whose counter is pinned at their order's recovery."""
    recoveries_of: dict[int, set[int]] = {}
    for r, by_id in orders.items():
        for order_id in by_id:
            recoveries_of.setdefault(order_id, set()).add(r)
    known = recovery_known_by(facts, group)
    counters = [(o.start, o.recovery_id) for o in facts.observations(group) if o.recovery_id is not None]
    out = []
    for ack in facts.of(group, "ack_order"):
        rs = recoveries_of.get(ack.value["order_id"], set())
        if not ack.ok or ack.answer["group_state"] != RUNNING or len(rs) != 1:
            continue  # an order id seen in two recoveries (a lost write reused it) pins nothing
        r = next(iter(rs))
        # The counter was r or more before the ack was sent, and r or less after it returned.
        at_least_r = known.first_at_least(None, r)[0] <= ack.start
        at_most_r = max((start for start, k in counters if k <= r), default=-INF) >= ack.applied_by
        if at_least_r and at_most_r:
            out.append(RunningSeen(ack, r))
    return out
