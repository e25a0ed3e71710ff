"""Admission and the failure detector's stall credit (core.overload), decided without a clock."""
from __future__ import annotations

import pytest

from coordinator.core.decisions import Lease, expired_leases, extend
from coordinator.core.overload import (AdmissionLimits, DetectorTick, LagWindow, Load, Work, admit,
                                       stall_credit)

LIMITS = AdmissionLimits(max_proposals_waiting=10, max_rpcs_in_flight=20, lag_s=0.25, keepalive_lag_s=1.0)


def load(proposals: int = 0, rpcs: int = 0, loop: float = 0.0, tick: float = 0.0) -> Load:
    return Load(proposals, rpcs, loop, tick)


def test_an_idle_node_admits_everything() -> None:
    assert all(admit(work, load(), LIMITS) is None for work in Work)


@pytest.mark.parametrize("lag", [0.3, 0.9])
def test_between_the_two_lag_bounds_only_keepalives_pass(lag: float) -> None:
    for measured in (load(loop=lag), load(tick=lag)):
        assert admit(Work.READ, measured, LIMITS) is not None
        assert admit(Work.WRITE, measured, LIMITS) is not None
        assert admit(Work.KEEPALIVE, measured, LIMITS) is None


def test_past_the_keepalive_bound_keepalives_are_shed_too() -> None:
    shed = admit(Work.KEEPALIVE, load(loop=1.5), LIMITS)
    assert shed is not None and "lagging" in shed.why


def test_waiting_proposals_shed_writes_but_not_keepalives_or_reads() -> None:
    full = load(proposals=10)
    assert admit(Work.WRITE, full, LIMITS) is not None
    assert admit(Work.READ, full, LIMITS) is None
    assert admit(Work.KEEPALIVE, full, LIMITS) is None
    assert admit(Work.WRITE, load(proposals=9), LIMITS) is None


def test_calls_in_flight_shed_all_but_keepalives() -> None:
    busy = load(rpcs=20)
    assert admit(Work.WRITE, busy, LIMITS) is not None and admit(Work.READ, busy, LIMITS) is not None
    assert admit(Work.KEEPALIVE, busy, LIMITS) is None


def test_the_retry_hint_grows_with_the_lag_within_its_bounds() -> None:
    hints = [admit(Work.WRITE, load(loop=lag), LIMITS).retry_after_s for lag in (0.3, 1.0, 2.0, 60.0)]
    assert hints == sorted(hints) and hints[0] >= LIMITS.min_retry_s and hints[-1] == LIMITS.max_retry_s
    assert admit(Work.WRITE, load(proposals=10), LIMITS).retry_after_s == LIMITS.min_retry_s


def test_limits_that_would_shed_keepalives_first_are_refused() -> None:
    with pytest.raises(ValueError, match="keepalives are shed last"):
        AdmissionLimits(lag_s=2.0, keepalive_lag_s=1.0)


def test_a_lag_window_keeps_the_worst_within_its_horizon() -> None:
    window = LagWindow(horizon_s=10.0)
    window.add(0.0, 2.0)
    window.add(5.0, 0.1)
    assert window.worst_since(0.0) == 2.0 and window.worst_since(1.0) == 0.1
    window.add(11.0, -0.5)  # an early wake-up is no lateness; the 2 s sample falls out of the horizon
    assert window.worst_since(-100.0) == 0.1 and window.last_lag_s == 0.0


def test_lateness_counts_twice_only_when_two_samples_in_a_row_saw_it() -> None:
    window = LagWindow(horizon_s=10.0)
    window.add(1.0, 0.5)  # one pause
    window.on_time()
    window.add(2.0, 0.4)  # another, not right after it
    assert window.worst_since(0.0) == 0.5 and window.worst_twice_since(0.0) == 0.0
    window.add(2.5, 0.3)  # late again at once: 0.3 seen twice in a row
    window.add(3.0, 0.6)
    assert window.worst_twice_since(0.0) == 0.3 and window.worst_twice_since(2.8) == 0.3
    assert window.worst_twice_since(3.1) == 0.0  # the later sample of each pair is older than asked


def tick(gap: float = 0.25, loop: float = 0.0, raft: float = 0.0, shed: int = 0) -> DetectorTick:
    return DetectorTick(gap_s=gap, period_s=0.25, loop_lag_s=loop, tick_lag_s=raft, keepalives_shed=shed)


def test_a_healthy_leader_credits_nothing() -> None:
    assert stall_credit(tick()) == 0.0
    assert stall_credit(tick(gap=0.6, loop=0.2, raft=0.3)) == 0.0  # late, but within the threshold


@pytest.mark.parametrize("window", [tick(gap=3.0), tick(loop=0.8), tick(raft=0.8), tick(shed=1)])
def test_a_stalled_window_is_credited_whole(window: DetectorTick) -> None:
    assert stall_credit(window) == window.gap_s  # never more time than passed: later windows credit the rest


def test_a_credited_lease_does_not_expire_for_the_leaders_stall() -> None:
    """An agent whose lease had 1 s left when the leader stalled 5 s keeps its 1 s."""
    leases = {("g", "a"): Lease(1, expires_at=101.0, ttl_s=10.0), ("g", "b"): Lease(2, expires_at=104.0, ttl_s=10.0)}
    now = 105.0  # the leader's first tick after a 5 s stall that began at 100
    extend(leases, stall_credit(tick(gap=5.0)))
    assert expired_leases(leases, now) == []
    assert [d.agent_id for d in expired_leases(leases, now + 1.0)] == ["a"]
    extend(leases, 0.0)
    assert leases[("g", "b")] == Lease(2, 109.0, 10.0)


def test_expired_leases_are_exactly_the_run_out_ones_in_key_order() -> None:
    """The leader proposes failures in this order on every node's log: it must not
    depend on the order leases were renewed in."""
    leases = {("g2", "a"): Lease(1, 5.0, 1.0), ("g1", "z"): Lease(3, 9.0, 1.0), ("g1", "b"): Lease(2, 4.0, 1.0),
              ("g1", "c"): Lease(4, 5.0, 1.0), ("g0", "x"): Lease(5, 5.0001, 1.0)}
    due = expired_leases(leases, 5.0)
    assert [(d.group, d.agent_id, d.incarnation) for d in due] == [("g1", "b", 2), ("g1", "c", 4), ("g2", "a", 1)]
