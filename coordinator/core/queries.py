"""Read-only questions about replicated state that both the state machine and the API ask.

Each answer is decided here once, so a read (a heartbeat, an order stream, a what-if)
and the replicated command it stands in for can never disagree about the same state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from coordinator.core.commands import RollbackTarget, Token
from coordinator.core.errors import ReasonCode, Rejection, shown
from coordinator.core.history import Dependency
from coordinator.core.model import Agent, AgentState
from coordinator.core.recovery_plan import plan_recovery
from coordinator.core.state import State


def registered_agent(state: State, group: str, agent_id: str) -> Agent:
    """The agent in whatever state it is; NOT_FOUND if it never registered."""
    found = state.agent(group, agent_id)
    if found is None:
        raise Rejection.not_found(f"agent {agent_id!r} in group {group!r}", ReasonCode.AGENT_NOT_FOUND)
    return found


def is_live(agent: Agent, incarnation: int) -> bool:
    """Whether `incarnation` is the agent's current one and has neither failed nor left.

    A zombie (an older incarnation) or an incarnation that was declared failed or left
    must be refused by every path, or it could act on state its replacement owns; and
    a failure reported for it is old news."""
    return incarnation == agent.incarnation and agent.state is AgentState.ALIVE


def live_agent(state: State, group: str, agent_id: str, token: Token) -> Agent:
    """The agent, if `token` holds its live incarnation and the secret it registered with;
    else the Rejection that fences it. The incarnation is public (reads show it), the
    secret is not: knowing the number alone does not let a caller act as the agent."""
    agent = registered_agent(state, group, agent_id)
    if is_live(agent, token.incarnation):
        # After the incarnation check: a zombie is told it is stale, whatever it sends.
        if token.secret_hash != agent.secret_hash:
            raise Rejection.because(ReasonCode.WRONG_AGENT_SECRET,
                                    f"not the secret agent {agent_id!r} registered incarnation "
                                    f"{agent.incarnation} with", "token.secret")
        return agent
    if token.incarnation != agent.incarnation:
        raise Rejection.because(
            ReasonCode.STALE_INCARNATION,
            f"stale incarnation {token.incarnation}: agent {agent_id!r} is at incarnation {agent.incarnation}",
            "token.incarnation")
    raise Rejection.because(ReasonCode.AGENT_NOT_ALIVE, f"agent {agent_id!r} is {agent.state.value}; register again",
                            "agent_id")


@dataclass(frozen=True)
class RecoveryInputs:
    """What a recovery line is computed from, as of one state."""

    usable: Mapping[str, tuple[int, ...]]  # per member, its stable checkpoint indexes
    current: Mapping[str, int]  # per member, its last checkpoint index
    dependencies: tuple[Dependency, ...]
    failed: frozenset[str]

    def plan(self) -> tuple[RollbackTarget, ...]:
        return plan_recovery(self.usable, self.current, self.dependencies, self.failed)


def recovery_inputs(state: State, group: str, failed_ids: Collection[str]) -> RecoveryInputs:
    """The inputs of the recovery that would run if `failed_ids` failed now.

    Agents already failed, and agents still owing an acknowledgement for an earlier
    rollback order, count as failed too: they may already have rolled back, so they
    cannot be assumed to hold their later state. Raises NOT_FOUND (field "failed") if a
    named agent is not a member."""
    agents = [a for a in state.agents(group) if a.state is not AgentState.DEREGISTERED]
    unknown = set(failed_ids) - {a.agent_id for a in agents}
    if unknown:
        raise Rejection.because(ReasonCode.AGENT_NOT_FOUND,
                                f"agents {shown(sorted(unknown))} are not members of group {group!r}", "failed")
    failed = frozenset(failed_ids) | {a.agent_id for a in agents if a.state is AgentState.FAILED or a.rollback_order}
    return RecoveryInputs(
        usable={a.agent_id: tuple(c.index for c in state.checkpoints(group, a.agent_id) if c.stable) for a in agents},
        current={a.agent_id: a.last_checkpoint_index for a in agents},
        dependencies=tuple(state.dependencies(group)),
        failed=failed)


def plan_for(state: State, group: str, failed_ids: Collection[str]) -> tuple[RollbackTarget, ...]:
    """The rollback targets of the recovery that would run if `failed_ids` failed now."""
    return recovery_inputs(state, group, failed_ids).plan()
