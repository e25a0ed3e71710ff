"""The leader's lease table: what the servicers renew and forget decides what the loop declares failed."""
from __future__ import annotations

from coordinator.core.commands import DeclareAgentFailed
from coordinator.core.model import Agent, AgentState, Group, GroupSpec
from coordinator.service.leases import LeaseTable

GROUP = Group(GroupSpec("g", lease_ttl_s=0.0))  # every lease has run out when it is checked


def test_an_agent_that_left_is_not_declared_failed_when_its_lease_runs_out() -> None:
    table = LeaseTable()
    table.renew(GROUP, "a", 1)
    table.renew(GROUP, "b", 2)
    table.forget("g", "a")
    table.forget("g", "nobody")  # forgetting what is not there is no error
    assert table.expired() == [DeclareAgentFailed("g", "b", 2)]
    assert table.expired() == []  # declared once


def test_a_new_leader_grants_every_live_agent_a_lease() -> None:
    agents = [Agent("g", "a", 1, AgentState.ALIVE), Agent("g", "b", 1, AgentState.FAILED)]
    table = LeaseTable()
    table.grant_all(7, [GROUP], lambda group: agents)
    assert table.term_granted == 7 and set(table.leases) == {("g", "a")}
