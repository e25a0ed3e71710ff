"""Who may do what: the one authorization decision, as a pure table.

The transport asks it before anything is proposed (with the caller's identity and
the bindings file's grants), and the state machine asks it again for every entry
that carries a principal (the grant the proposer found), so every replica reaches
the same answer from the entry alone, whatever its own bindings file says.

Roles, as in etcd's users and roles (a certificate's CN, or a token's identity,
is the user name):
- admin: every RPC, and may act for any agent (tools, the local harness);
- agent: the agent RPCs for agent ids matching its fnmatch pattern in its one
  group, and the reads of that group;
- observer: the read-only RPCs.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping

from coordinator.core.errors import ReasonCode, Rejection


class Role(StrEnum):
    ADMIN = "admin"
    AGENT = "agent"
    OBSERVER = "observer"


class Access(StrEnum):
    """What an RPC does, which is all the decision needs to know about it."""

    AGENT_WRITE = "agent"  # acts as one agent (the agent's own RPCs, reads included)
    GROUP_READ = "group-read"  # reads one group
    CLUSTER_READ = "cluster-read"  # reads the node
    ADMIN = "admin"  # changes groups, collects garbage, changes membership


# Every RPC of raftpoint.v1, by method name. An RPC missing here is refused to all
# but admin, so a new RPC is closed until someone decides who may call it.
RPC_ACCESS: Mapping[str, Access] = {
    "Register": Access.AGENT_WRITE, "Heartbeat": Access.AGENT_WRITE, "CommitCheckpoint": Access.AGENT_WRITE,
    "ReportDependencies": Access.AGENT_WRITE, "WatchOrders": Access.AGENT_WRITE, "AckOrder": Access.AGENT_WRITE,
    "Deregister": Access.AGENT_WRITE,
    # A session carries the agent RPCs above as frames: each frame is decided as its own
    # operation (transport.auth.FRAME_CHECK); opening one needs only an identity.
    "Session": Access.AGENT_WRITE,
    "GetGroup": Access.GROUP_READ, "ListCheckpoints": Access.GROUP_READ, "WhatIf": Access.GROUP_READ,
    "ListSavepoints": Access.GROUP_READ, "ListDependencies": Access.GROUP_READ,
    # Names every group: an agent identity, bound to one group, is refused it (FOREIGN_AGENT).
    "ListGroups": Access.GROUP_READ,
    "ClusterStatus": Access.CLUSTER_READ,
    "CreateGroup": Access.ADMIN, "StartEpoch": Access.ADMIN, "GarbageCollect": Access.ADMIN,
    "DeleteGroup": Access.ADMIN, "AddNode": Access.ADMIN, "RemoveNode": Access.ADMIN,
    "ResetDedupeClock": Access.ADMIN, "CreateSavepoint": Access.ADMIN, "DeleteSavepoint": Access.ADMIN,
    "SetRetention": Access.ADMIN,
    "SaveSnapshot": Access.ADMIN,  # the whole state, every group's
    "RestoreGroup": Access.ADMIN,  # a dry run too: it reads what a restore would undo
    "ForkGroup": Access.ADMIN,
}

# Which accesses each role holds; the agent role's are limited to its group (and,
# for AGENT_WRITE, to its agent-id pattern).
ROLE_ACCESS: Mapping[Role, frozenset[Access]] = {
    Role.ADMIN: frozenset(Access),
    Role.AGENT: frozenset({Access.AGENT_WRITE, Access.GROUP_READ, Access.CLUSTER_READ}),
    Role.OBSERVER: frozenset({Access.GROUP_READ, Access.CLUSTER_READ}),
}


@dataclass(frozen=True)
class Grant:
    """One identity's binding: its role and, for the agent role, its group and agent ids."""

    identity: str
    role: Role
    group: str = ""
    pattern: str = ""


@dataclass(frozen=True)
class Allowed:
    grant: Grant


def decide(identity: str | None, grants: Mapping[str, Grant], rpc: str, group: str = "",
           agent_id: str = "") -> Allowed | Rejection:
    """May `identity` call `rpc` on `group` (for `agent_id`)? None: no credentials.

    Chaos seam: `skip-authz` (chaos/planted.py) replaces it with one allowing everything."""
    if identity is None:
        return Rejection.because(ReasonCode.UNAUTHENTICATED, "no credentials: present a client certificate or "
                                 "an 'authorization: Bearer <token>' header")
    grant = grants.get(identity)
    if grant is None:
        return Rejection.because(ReasonCode.ROLE_FORBIDS, f"identity {identity!r} has no role")
    return permits(grant, rpc, group, agent_id)


def permits(grant: Grant, rpc: str, group: str = "", agent_id: str = "") -> Allowed | Rejection:
    """The decision for an identity whose grant is known (the state machine's re-check).

    Chaos seam: `skip-authz` (chaos/planted.py) replaces it with one allowing everything."""
    access = RPC_ACCESS.get(rpc, Access.ADMIN)
    if access not in ROLE_ACCESS.get(grant.role, frozenset()):
        return Rejection.because(ReasonCode.ROLE_FORBIDS,
                                 f"identity {grant.identity!r} ({grant.role.value}) may not call {rpc}")
    if grant.role is not Role.AGENT or access is Access.CLUSTER_READ:
        return Allowed(grant)
    if group != grant.group:
        return Rejection.because(ReasonCode.FOREIGN_AGENT,
                                 f"identity {grant.identity!r} acts for group {grant.group!r} only, not {group!r}",
                                 "group")
    if access is Access.AGENT_WRITE and not fnmatch.fnmatchcase(agent_id, grant.pattern):
        return Rejection.because(ReasonCode.FOREIGN_AGENT, f"identity {grant.identity!r} acts for agents "
                                 f"{grant.pattern!r} only, not {agent_id!r}", "agent_id")
    return Allowed(grant)


def check(decision: Allowed | Rejection) -> Grant:
    """The grant of an allowed decision; raises the refusal otherwise."""
    if isinstance(decision, Rejection):
        raise decision
    return decision.grant

