from __future__ import annotations

from coordinator.core.commands import AbortEpoch, DeclareAgentFailed, StartEpoch
from coordinator.core.decisions import Lease, epoch_commands, expired_leases, release_hold, renew
from coordinator.core.model import Epoch, EpochState, Group, GroupSpec, GroupState, Mode


def group(**spec: object) -> Group:
    return Group(spec=GroupSpec("g", Mode.COORDINATED, **spec), members=("a",), created_at=100.0)


def test_epoch_started_when_interval_due() -> None:
    g = group(checkpoint_interval_s=10)
    assert epoch_commands(g, None, 105.0) == []
    assert epoch_commands(g, None, 110.0) == [StartEpoch("g")]
    done = Epoch("g", 1, EpochState.STABLE, ("a",), started_at=110.0, deadline=140.0)
    assert epoch_commands(g, done, 119.0) == []
    assert epoch_commands(g, done, 120.0) == [StartEpoch("g")]


def test_young_daly_interval_used_without_explicit_interval() -> None:
    g = group(checkpoint_cost_s=2.0, mtbf_s=100.0)  # sqrt(2*2*100) = 20 s
    assert epoch_commands(g, None, 119.9) == []
    assert epoch_commands(g, None, 120.0) == [StartEpoch("g")]


def test_open_epoch_aborted_at_deadline_only() -> None:
    g = group(checkpoint_interval_s=10)
    open_epoch = Epoch("g", 3, EpochState.STARTED, ("a",), started_at=100.0, deadline=130.0)
    assert epoch_commands(g, open_epoch, 129.0) == []
    [abort] = epoch_commands(g, open_epoch, 130.0)
    assert isinstance(abort, AbortEpoch) and abort.epoch == 3


def test_no_epochs_while_recovering_or_in_cic_mode() -> None:
    recovering = Group(spec=GroupSpec("g", Mode.COORDINATED, checkpoint_interval_s=1), state=GroupState.RECOVERING,
                       members=("a",))
    assert epoch_commands(recovering, None, 1e6) == []
    assert epoch_commands(Group(spec=GroupSpec("g", Mode.CIC_BCS, checkpoint_interval_s=1), members=("a",)), None, 1e6) == []


def test_leases_expire_and_renew() -> None:
    leases: dict = {}
    renew(leases, group(lease_ttl_s=5), "a", 2, now=10.0)
    assert expired_leases(leases, 14.9) == []
    assert expired_leases(leases, 15.0) == [DeclareAgentFailed("g", "a", 2)]
    leases[("g", "b")] = Lease(1, 20.0, 5.0)
    renew(leases, group(lease_ttl_s=5), "a", 2, now=14.0)
    assert expired_leases(leases, 18.9) == []
    assert [d.agent_id for d in expired_leases(leases, 20.0)] == ["a", "b"]


def test_a_lease_held_by_an_open_session_of_its_incarnation_does_not_run_out() -> None:
    leases: dict = {}
    renew(leases, group(lease_ttl_s=5), "a", 2, now=10.0)
    renew(leases, group(lease_ttl_s=5), "b", 1, now=10.0)
    # Proved at 90: held for 3 TTLs (15 s) from then. b's session holds an incarnation b no longer is.
    held = {("g", "a"): {2: 90.0}, ("g", "b"): {7: 99.0}}
    assert expired_leases(leases, 100.0, held) == [DeclareAgentFailed("g", "b", 1)]
    assert leases[("g", "a")] == Lease(2, 105.0, 5.0)  # looked at again a TTL later, not every tick
    assert expired_leases(leases, 104.9, held) == [DeclareAgentFailed("g", "b", 1)]  # b not yet forgotten here
    # Not proved since 90: at 105, 3 TTLs later, the hold keeps the lease no longer (a stuck agent).
    assert [d.agent_id for d in expired_leases(leases, 105.0, held)] == ["a", "b"]


def test_a_released_hold_gives_its_agent_a_whole_ttl_from_the_release() -> None:
    leases: dict = {}
    renew(leases, group(lease_ttl_s=5), "a", 2, now=10.0)
    release_hold(leases, ("g", "a"), 2, now=100.0)  # held past its expiry, then the session ended
    assert expired_leases(leases, 104.9) == []
    assert expired_leases(leases, 105.0) == [DeclareAgentFailed("g", "a", 2)]
    release_hold(leases, ("g", "a"), 1, now=200.0)  # an older incarnation's session: not a's lease any more
    release_hold(leases, ("g", "gone"), 1, now=200.0)  # no lease at all (the agent left): none is made
    assert leases == {("g", "a"): Lease(2, 105.0, 5.0)}
