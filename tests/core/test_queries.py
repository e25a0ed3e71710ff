"""The read-only rules the state machine and the API share: the live-incarnation
fence, and the inputs of a recovery (which a what-if must answer from exactly)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import commands as c
from coordinator.core import queries
from coordinator.core.errors import Code, Rejection
from coordinator.core.history import Dependency
from coordinator.core.model import AgentState, GroupSpec, Mode, OrderKind
from tests.core.test_state_machine import Machine


@pytest.fixture
def m() -> Machine:
    return Machine()


def _refusal(m: Machine, agent_id: str, incarnation: int, group: str = "g") -> Rejection:
    with pytest.raises(Rejection) as info:
        queries.live_agent(m.state, group, agent_id, c.Token(incarnation, 0))
    return info.value


# ---- live_agent ---------------------------------------------------------------------

def _group_with_dead_tokens(m: Machine) -> None:
    """a restarted (incarnation 2 owes a rollback), b was declared failed, d left."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    for agent in ("a", "a", "b", "d"):
        m.register("g", agent)
    m.ok(c.Deregister("g", "d", c.Token(1, 0)))
    m.ok(c.DeclareAgentFailed("g", "b", 1))


def test_the_live_incarnation_is_accepted_even_with_a_rollback_pending(m: Machine) -> None:
    """Reads (heartbeats, the order stream) must reach an agent that owes a rollback:
    the order stream is how it learns of the rollback."""
    _group_with_dead_tokens(m)
    agent = queries.live_agent(m.state, "g", "a", c.Token(2, 0))
    assert (agent.agent_id, agent.incarnation, agent.state) == ("a", 2, AgentState.ALIVE)
    assert agent.rollback_order and agent == m.state.agent("g", "a")


def test_an_unknown_agent_or_group_is_not_found(m: Machine) -> None:
    _group_with_dead_tokens(m)
    unknown = _refusal(m, "zz", 1)
    assert (unknown.code, unknown.reason) == (Code.NOT_FOUND, "agent 'zz' in group 'g' does not exist")
    assert _refusal(m, "a", 2, group="nope").code is Code.NOT_FOUND


def test_an_older_or_newer_incarnation_is_stale(m: Machine) -> None:
    _group_with_dead_tokens(m)
    for incarnation in (1, 3):
        stale = _refusal(m, "a", incarnation)
        assert (stale.code, stale.field) == (Code.FAILED_PRECONDITION, "token.incarnation")
        assert stale.reason == f"stale incarnation {incarnation}: agent 'a' is at incarnation 2"


def test_a_failed_or_departed_incarnation_must_register_again(m: Machine) -> None:
    _group_with_dead_tokens(m)
    for agent_id, state in (("b", "failed"), ("d", "deregistered")):
        refused = _refusal(m, agent_id, 1)
        assert (refused.code, refused.field) == (Code.FAILED_PRECONDITION, "agent_id")
        assert refused.reason == f"agent {agent_id!r} is {state}; register again"


def test_every_agent_command_refuses_a_dead_token_with_the_same_rejection(m: Machine) -> None:
    """Writes and acknowledgements apply the one rule (writes then add their own checks)."""
    _group_with_dead_tokens(m)
    [order] = [o for o in m.state.orders("g") if o.agent_id == "a"]
    for agent_id in ("a", "b", "d", "zz"):
        expected = _refusal(m, agent_id, 1)
        token = c.Token(1, 0)
        for command in (c.AckOrder("g", agent_id, token, order.order_id), c.Deregister("g", agent_id, token),
                        c.ReportDependencies("g", agent_id, token, ())):
            failure = m.fail(command, expected.code)
            assert (failure.field, failure.reason) == (expected.field, expected.reason), command


def test_a_failure_reported_for_an_incarnation_that_is_not_live_changes_nothing(m: Machine) -> None:
    _group_with_dead_tokens(m)
    before = m.store.digest()
    for agent_id in ("a", "b", "d"):
        assert m.ok(c.DeclareAgentFailed("g", agent_id, 1)).targets == ()
    assert m.store.digest() == before


# ---- what-if == recovery ---------------------------------------------------------------

def _history_with_an_unacknowledged_rollback(m: Machine) -> None:
    """a's failure rolls a and b back (b received a send a's rollback undid); a comes back,
    acknowledges and checkpoints again; b has not acknowledged yet, and c received what b
    sent in its new generation."""
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    for agent in ("a", "b", "c"):
        m.register("g", agent)
        assert not isinstance(m.commit("g", agent, 1), c.Failure)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 2, "m1", 1),)))
    first = m.ok(c.DeclareAgentFailed("g", "a", 1))
    assert {(t.agent_id, t.checkpoint_index) for t in first.targets} == {("a", 1), ("b", 1)}
    m.register("g", "a")
    orders = {o.agent_id: o for o in m.state.orders("g") if o.kind is OrderKind.ROLL_BACK}
    m.ok(c.AckOrder("g", "a", c.Token(2, 0), orders["a"].order_id))
    assert not isinstance(m.commit("g", "a", 2, inc=2), c.Failure)
    m.ok(c.ReportDependencies("g", "c", c.Token(1, 0),
                              (Dependency("b", 2, "c", 2, "m2", orders["b"].generation),)))
    assert m.state.agent("g", "b").rollback_order


def test_what_if_answers_the_recovery_that_follows_while_an_agent_owes_an_ack(m: Machine) -> None:
    _history_with_an_unacknowledged_rollback(m)
    what_if = queries.plan_for(m.state, "g", ["a"])
    recovery = m.ok(c.DeclareAgentFailed("g", "a", 2))
    assert what_if == recovery.targets
    # b owes an acknowledgement, so it counts as failed; c received what b sent after its target.
    assert [(t.agent_id, t.checkpoint_index) for t in recovery.targets] == [("a", 2), ("b", 1), ("c", 1)]


def test_what_if_counts_an_agent_that_failed_and_has_not_come_back(m: Machine) -> None:
    _history_with_an_unacknowledged_rollback(m)
    m.ok(c.DeclareAgentFailed("g", "a", 2))  # a stays failed; b and c owe acknowledgements
    inputs = queries.recovery_inputs(m.state, "g", ["c"])
    assert inputs.failed == {"a", "b", "c"}
    what_if = inputs.plan()
    assert what_if == m.ok(c.DeclareAgentFailed("g", "c", 1)).targets


def test_what_if_refuses_agents_that_are_not_members(m: Machine) -> None:
    _history_with_an_unacknowledged_rollback(m)
    with pytest.raises(Rejection) as info:
        queries.recovery_inputs(m.state, "g", ["a", "zz"])
    assert (info.value.code, info.value.field) == (Code.NOT_FOUND, "failed")
    assert info.value.reason == "agents ['zz'] are not members of group 'g'"


AGENTS = ("a", "b", "c")
steps = st.lists(st.tuples(st.sampled_from(("register", "commit", "send", "fail", "ack")),
                           st.sampled_from(AGENTS), st.sampled_from(AGENTS)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_every_failure_rolls_back_what_the_what_if_just_before_said(history: list[tuple[str, str, str]]) -> None:
    """Over random histories of restarts, checkpoints, messages, failures and (some)
    acknowledgements: a failure's recovery is exactly the what-if asked just before it."""
    m = Machine()
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS)))
    for agent in AGENTS:
        m.register("g", agent)
    for n, (step, agent_id, other) in enumerate(history):
        agent = m.state.agent("g", agent_id)
        token = c.Token(agent.incarnation, 0)
        if step == "register":
            m.run(c.Register("g", agent_id))
        elif step == "commit":
            m.commit("g", agent_id, agent.last_checkpoint_index + 1, inc=agent.incarnation)
        elif step == "send" and other != agent_id:
            sender = m.state.agent("g", other)
            dep = Dependency(other, sender.last_checkpoint_index + 1, agent_id, agent.last_checkpoint_index + 1,
                             f"m{n}", sender.generation)
            m.run(c.ReportDependencies("g", agent_id, token, (dep,)))
        elif step == "fail" and agent.state is AgentState.ALIVE:
            what_if = queries.plan_for(m.state, "g", [agent_id])
            assert m.ok(c.DeclareAgentFailed("g", agent_id, agent.incarnation)).targets == what_if
        elif step == "ack" and agent.rollback_order:
            m.run(c.AckOrder("g", agent_id, token, agent.rollback_order))
