"""The authorization table, one row per RPC and role (coordinator/core/authz.py)."""
from __future__ import annotations

import pytest

from coordinator.core import authz
from coordinator.core.authz import Allowed, Grant, Role
from coordinator.core.commands import (AckOrder, CommitCheckpoint, CreateGroup, DeclareAgentFailed, Entry, Register,
                                       Token, command_target)
from coordinator.core.errors import Code, ReasonCode, Rejection
from coordinator.core.model import Checkpoint, CheckpointKind, GroupSpec, Mode

ADMIN = Grant("root", Role.ADMIN)
AGENT = Grant("w1", Role.AGENT, "g", "worker-*")
OBSERVER = Grant("eye", Role.OBSERVER)
GRANTS = {g.identity: g for g in (ADMIN, AGENT, OBSERVER)}

AGENT_RPCS = ("Register", "Heartbeat", "CommitCheckpoint", "ReportDependencies", "WatchOrders", "AckOrder",
              "Deregister")
READS = ("GetGroup", "ListCheckpoints", "WhatIf", "ListSavepoints", "ListDependencies")
ADMIN_ONLY = ("CreateGroup", "StartEpoch", "GarbageCollect", "DeleteGroup", "AddNode", "RemoveNode",
              "CreateSavepoint", "DeleteSavepoint")

# (rpc, identity, group, agent_id) -> the reason it is refused, or None when allowed
CASES = [
    *[(rpc, "root", "g", "anyone", None) for rpc in (*AGENT_RPCS, *READS, *ADMIN_ONLY, "ClusterStatus")],
    *[(rpc, "w1", "g", "worker-7", None) for rpc in AGENT_RPCS],
    *[(rpc, "w1", "g", "boss", ReasonCode.FOREIGN_AGENT) for rpc in AGENT_RPCS],
    *[(rpc, "w1", "other", "worker-7", ReasonCode.FOREIGN_AGENT) for rpc in AGENT_RPCS],
    *[(rpc, "w1", "g", "", None) for rpc in READS],
    *[(rpc, "w1", "other", "", ReasonCode.FOREIGN_AGENT) for rpc in READS],
    ("ClusterStatus", "w1", "", "", None),
    *[(rpc, "w1", "g", "", ReasonCode.ROLE_FORBIDS) for rpc in ADMIN_ONLY],
    *[(rpc, "eye", "g", "", None) for rpc in (*READS, "ClusterStatus")],
    *[(rpc, "eye", "g", "a", ReasonCode.ROLE_FORBIDS) for rpc in (*AGENT_RPCS, *ADMIN_ONLY)],
    *[(rpc, "stranger", "g", "a", ReasonCode.ROLE_FORBIDS) for rpc in (*AGENT_RPCS, *READS, "ClusterStatus")],
    *[(rpc, None, "g", "a", ReasonCode.UNAUTHENTICATED) for rpc in (*AGENT_RPCS, *READS, "ClusterStatus")],
    # Listing groups names every group: not for an identity bound to one.
    ("ListGroups", "root", "", "", None),
    ("ListGroups", "eye", "", "", None),
    ("ListGroups", "w1", "", "", ReasonCode.FOREIGN_AGENT),
    ("SomeFutureRpc", "w1", "g", "worker-1", ReasonCode.ROLE_FORBIDS),
    ("SomeFutureRpc", "root", "g", "worker-1", None),
]


@pytest.mark.parametrize("rpc,identity,group,agent_id,refused", CASES)
def test_decision_table(rpc: str, identity: str | None, group: str, agent_id: str,
                        refused: ReasonCode | None) -> None:
    decision = authz.decide(identity, GRANTS, rpc, group, agent_id)
    if refused is None:
        assert isinstance(decision, Allowed) and decision.grant == GRANTS[identity]
    else:
        assert isinstance(decision, Rejection) and decision.reason_code is refused


def test_every_rpc_of_the_api_is_in_the_table() -> None:
    from coordinator.api.v1 import coordinator_pb2 as pb

    rpcs = {m.name for s in pb.DESCRIPTOR.services_by_name.values() for m in s.methods}
    assert rpcs == set(authz.RPC_ACCESS)


def test_refusals_have_the_statuses_clients_branch_on() -> None:
    assert ReasonCode.UNAUTHENTICATED.code is Code.UNAUTHENTICATED
    assert {r.code for r in (ReasonCode.ROLE_FORBIDS, ReasonCode.FOREIGN_AGENT, ReasonCode.WRONG_AGENT_SECRET)} == {
        Code.PERMISSION_DENIED}


def _checkpoint(agent_id: str) -> Checkpoint:
    return Checkpoint("g", agent_id, 1, 0, CheckpointKind.BASIC, "file:///b", "c" * 64, 1)


@pytest.mark.parametrize("command,target", [
    (CommitCheckpoint(Token(1, 0), _checkpoint("worker-1")), ("CommitCheckpoint", "g", "worker-1")),
    (Register("g", "a"), ("Register", "g", "a")),
    (AckOrder("g", "b", Token(1, 0), 3), ("AckOrder", "g", "b")),
    (CreateGroup(GroupSpec(name="g")), ("CreateGroup", "g", "")),
    (DeclareAgentFailed("g", "a", 1), ("DeclareAgentFailed", "g", "a")),
])
def test_a_command_is_checked_as_the_rpc_it_stands_for(command: object, target: tuple[str, str, str]) -> None:
    assert command_target(command) == target


def test_the_state_machine_refuses_an_entry_whose_principal_may_not_act_for_the_agent() -> None:
    """Every replica re-checks the grant the entry carries, whatever its proposer decided."""
    from coordinator.core.commands import Failure, Token
    from coordinator.core.state_machine import apply
    from coordinator.storage import open_store
    from coordinator.storage.state import KvState

    store = open_store("memory", None)

    def run(command: object, principal: Grant | None) -> object:
        state = KvState(store)
        result = apply(state, Entry(f"r{store.digest()[:8]}", 1.0, command, principal=principal))
        store.commit({} if isinstance(result, Failure) else state.encoded_writes(), 1)
        return result

    assert not isinstance(run(CreateGroup(GroupSpec(name="g", mode=Mode.CIC_BCS)), ADMIN), Failure)
    secret = "ab" * 32
    assert not isinstance(run(Register("g", "worker-1", secret), AGENT), Failure)
    before = store.digest()
    for command, principal, reason in [
        (CreateGroup(GroupSpec(name="h")), AGENT, ReasonCode.ROLE_FORBIDS),
        (Register("g", "boss", secret), AGENT, ReasonCode.FOREIGN_AGENT),
        (Register("g", "worker-1", secret), OBSERVER, ReasonCode.ROLE_FORBIDS),
        (CommitCheckpoint(Token(1, 0, secret), _checkpoint("boss")), AGENT, ReasonCode.FOREIGN_AGENT),
        (DeclareAgentFailed("g", "worker-1", 1), AGENT, ReasonCode.ROLE_FORBIDS),
        (CommitCheckpoint(Token(1, 0, "cd" * 32), _checkpoint("worker-1")), AGENT, ReasonCode.WRONG_AGENT_SECRET),
    ]:
        result = run(command, principal)
        assert isinstance(result, Failure) and result.reason_code is reason, (command, result)
        assert store.digest() == before
    assert not isinstance(run(CommitCheckpoint(Token(1, 0, secret), _checkpoint("worker-1")), AGENT), Failure)
