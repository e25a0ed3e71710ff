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


def test_a_lease_stays_held_until_the_last_of_its_sessions_ends() -> None:
    """A client's new session can open before its broken one has ended: the first to
    end must not start the lease's clock while the other still holds it."""
    now = [0.0]
    table = LeaseTable(monotonic=lambda: now[0])
    table.renew(Group(GroupSpec("g", lease_ttl_s=1.0)), "a", 1)
    table.hold("g", "a", 1)
    table.hold("g", "a", 1)
    table.release("g", "a", 1)
    now[0] = 1.5
    assert table.expired() == []  # past its TTL, but the other session still holds it
    table.release("g", "a", 1)  # the last one: a whole TTL from now
    table.release("g", "a", 1)  # one release too many changes nothing
    assert table.holds == {}
    now[0] = 2.4
    assert table.expired() == []
    now[0] = 2.5
    assert table.expired() == [DeclareAgentFailed("g", "a", 1)]


def test_a_held_lease_runs_out_when_its_keepalives_stop_proving_it() -> None:
    """The connection's pings are answered by the client's gRPC threads even when the
    agent's own code is stuck; three TTLs without a proving frame end the hold."""
    now = [0.0]
    table = LeaseTable(monotonic=lambda: now[0])
    group = Group(GroupSpec("g", lease_ttl_s=10.0))
    table.renew(group, "a", 1)
    table.hold("g", "a", 1)
    now[0] = 25.0
    table.prove("g", "a", 1)
    now[0] = 54.0
    assert table.expired() == []  # proved 29 s ago
    now[0] = 80.0
    assert table.expired() == [DeclareAgentFailed("g", "a", 1)]  # 55 s without a proof


def test_an_agent_that_left_is_held_by_none_of_its_sessions() -> None:
    table = LeaseTable()
    table.renew(GROUP, "a", 1)
    table.hold("g", "a", 1)
    table.forget("g", "a")
    table.prove("g", "a", 1)  # a frame of its old session after it left: no hold again
    table.renew(GROUP, "a", 1)  # the same incarnation number again (its group made anew)
    assert table.holds == {}
    assert table.expired() == [DeclareAgentFailed("g", "a", 1)]
    table.release("g", "a", 1)  # the old session ends: nothing to release


def test_live_agents_are_counted_by_what_keeps_their_lease() -> None:
    table = LeaseTable()
    for agent in ("a", "b", "c"):
        table.renew(Group(GroupSpec("g", lease_ttl_s=60.0)), agent, 1)
    table.hold("g", "a", 1)
    table.hold("g", "gone", 1)  # a session for an agent holding no lease counts for nothing
    assert table.live_by_lease() == {"session": 1, "keepalive": 2}
