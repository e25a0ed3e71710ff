"""An agent holds a bounded number of dependency records: a report past the quota is refused
whole, as RESOURCE_EXHAUSTED with its reason, and changes nothing."""
from __future__ import annotations

import pytest

from coordinator.core import commands as c
from coordinator.core import state_machine
from coordinator.core.errors import Code, ReasonCode
from coordinator.core.history import Dependency
from coordinator.core.model import GroupSpec, Mode
from coordinator.storage import open_store
from coordinator.storage.state import KvState

QUOTA = 5


def test_a_report_past_the_agents_quota_is_refused_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_machine, "MAX_DEPENDENCIES_PER_AGENT", QUOTA)
    store = open_store("memory", None)
    ids = iter(range(1, 100))

    def run(command: c.Command) -> c.Result:
        state = KvState(store)
        n = next(ids)
        result = state_machine.apply(state, c.Entry(f"r{n}", 100.0, command))
        store.commit({} if isinstance(result, c.Failure) else state.encoded_writes(), n)
        return result

    def report(*message_ids: str) -> c.Result:
        return run(c.ReportDependencies("g", "a", c.Token(1, 0), tuple(
            Dependency("b", 1, "a", 1, m) for m in message_ids)))

    run(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    run(c.Register("g", "a"))
    run(c.Register("g", "b"))
    assert report("m1", "m2", "m3").accepted == 3
    refused = report("m4", "m5", "m6")
    assert isinstance(refused, c.Failure)
    assert refused.code is Code.RESOURCE_EXHAUSTED and refused.reason_code is ReasonCode.DEPENDENCY_QUOTA
    assert "holds 3" in refused.reason and str(QUOTA) in refused.reason
    assert KvState(store).dependency_count("g", "a") == 3
    assert report("m4", "m5").accepted == 2
    assert KvState(store).dependency_count("g", "a") == QUOTA
