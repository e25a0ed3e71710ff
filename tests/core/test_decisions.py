from __future__ import annotations

from coordinator.core.commands import AbortEpoch, DeclareAgentFailed, StartEpoch
from coordinator.core.decisions import Lease, epoch_commands, expired_leases, renew
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
    leases[("g", "b")] = Lease(1, 20.0)
    renew(leases, group(lease_ttl_s=5), "a", 2, now=14.0)
    assert expired_leases(leases, 18.9) == []
    assert [d.agent_id for d in expired_leases(leases, 20.0)] == ["a", "b"]
