"""AddNode and RemoveNode: check that a change keeps the cluster working, then propose it.

Raft applies any membership change it is given. Three AddNode calls for
addresses nobody ran left a 3-node cluster with 6 members and no majority (for
good: the members are in the log), and two RemoveNode calls left one node that
acknowledged writes alone. So before proposing:

- AddNode proves the new node is up and ready: it answers pysyncobj's key
  exchange on its Raft address with this cluster's password, and its gRPC health
  service `raftpoint.joining` is SERVING (it knows no leader and has committed
  nothing: a node started to join, not a member of some cluster);
- RemoveNode keeps at least 3 voters and a live quorum of the new configuration
  (core.membership.check_removal), unless the request sets `force`.

One change at a time, as pysyncobj allows. Every call is a log line and a count
(observability.raft_log); the change itself is logged again by every node when it
applies it (member_added / member_removed).
"""
from __future__ import annotations

import asyncio
from typing import NoReturn

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS
from coordinator.core import ids, membership
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.observability import raft_log
from coordinator.replication.replica import Membership, MembershipOutcome, RaftProbeFailed
from coordinator.transport.proposer import Proposer
from coordinator.transport.status_map import abort_with

MEMBERSHIP_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 3.0
# The health service a node reports SERVING on while it waits to be added.
JOINING_SERVICE = "raftpoint.joining"


async def change(proposer: Proposer, context: grpc.aio.ServicerContext, request: pb.MembershipRequest,
                 *, add: bool, peer_tls: ClientTLS | None = None) -> pb.MembershipResponse:
    """Check, propose and await one membership change; aborts the RPC on any refusal.
    `peer_tls`: how this node reaches another node's gRPC port (None: plaintext)."""
    action = "add" if add else "remove"
    address = request.node
    try:
        ids.check_address(address, "node")
        if add and request.grpc:
            ids.check_address(request.grpc, "grpc")
    except Rejection as r:
        await _refuse(context, action, address, r)
    node = proposer.node
    if not node.is_leader():
        await proposer.abort_not_leader(context, node.leader_raft_address())
    if not isinstance(node, Membership):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this coordinator has no Raft membership")
    voters, live = node.voters()
    try:
        if add:
            membership.check_addition(voters, address)
        else:
            membership.check_removal(voters, live, address, force=request.force)
    except Rejection as r:
        await _refuse(context, action, address, r)
    if add:
        await _check_ready(context, node, address, request.grpc or _default_grpc(node, address),
                           peer_tls or ClientTLS.plaintext())
    outcome, why = await _propose(context, node, address, add=add)
    if outcome is MembershipOutcome.NOT_APPLIED:  # UNAVAILABLE and the leader: clients send it again there
        raft_log.membership_request(action, address, "NOT_APPLIED", reason=why)
        await proposer.abort_not_leader(context, node.leader_raft_address())
    if outcome is MembershipOutcome.UNKNOWN:
        await _outcome_unknown(context, action, address)
    if outcome is MembershipOutcome.REFUSED:
        await _refuse(context, action, address, Rejection.because(
            ReasonCode.MEMBERSHIP_CHANGE_REFUSED, f"membership change refused by Raft ({why}); one change at a time"))
    raft_log.membership_request(action, address, "done", voters=len(voters) + (1 if add else -1),
                                forced=bool(request.force) and not add)
    return pb.MembershipResponse(result="ok")


def _default_grpc(node, raft_address: str) -> str:
    """A member's gRPC address when the request names none: the one this node knows for
    it, else its Raft host with this node's gRPC port (every pod of a StatefulSet
    uses the same ports)."""
    known = node.config.grpc_of(raft_address)
    if known:
        return known
    own = node.config.grpc_of(node.status().node) or ""
    return f"{raft_address.rpartition(':')[0]}:{own.rpartition(':')[2]}"


async def _check_ready(context: grpc.aio.ServicerContext, node: Membership, raft_address: str, grpc_address: str,
                       peer_tls: ClientTLS) -> None:
    """Abort with NODE_NOT_READY unless the node answers with the password and waits to join."""
    try:
        await asyncio.to_thread(node.probe_member, raft_address, PROBE_TIMEOUT_S)
    except RaftProbeFailed as exc:
        await _refuse(context, "add", raft_address, Rejection.because(
            ReasonCode.NODE_NOT_READY, f"{raft_address} is not ready to join: {exc}"))
    state = await _joining_health(grpc_address, peer_tls)
    if state != "SERVING":
        await _refuse(context, "add", raft_address, Rejection.because(
            ReasonCode.NODE_NOT_READY,
            f"{raft_address} is not waiting to join: health of {JOINING_SERVICE} at {grpc_address} is {state} "
            "(start it with the cluster as its peers, and give its gRPC address if it is not the default)"))


async def _joining_health(grpc_address: str, peer_tls: ClientTLS) -> str:
    """The new node's `raftpoint.joining` health, or why it could not be read."""
    try:
        async with peer_tls.aio_channel(grpc_address) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=JOINING_SERVICE), timeout=PROBE_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        return f"unreadable ({exc.code().name})"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)


async def _propose(context: grpc.aio.ServicerContext, node: Membership, address: str, *,
                   add: bool) -> tuple[MembershipOutcome, str]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def callback(outcome: MembershipOutcome, why: str) -> None:
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result((outcome, why)))

    node.change_membership(address, add=add, callback=callback)
    remaining = context.time_remaining()
    try:
        return await asyncio.wait_for(done, MEMBERSHIP_TIMEOUT_S if remaining is None
                                      else min(MEMBERSHIP_TIMEOUT_S, remaining))
    except TimeoutError:
        await _outcome_unknown(context, "add" if add else "remove", address)


async def _outcome_unknown(context: grpc.aio.ServicerContext, action: str, address: str) -> NoReturn:
    """UNAVAILABLE: the change may yet be applied; the caller must look before trying again."""
    raft_log.membership_request(action, address, "unknown")
    await context.abort(grpc.StatusCode.UNAVAILABLE, "membership change outcome unknown; check ClusterStatus")
    raise AssertionError("context.abort returned")


async def _refuse(context: grpc.aio.ServicerContext, action: str, address: str, refusal: Rejection) -> NoReturn:
    raft_log.membership_request(action, address, refusal.reason_code.value, reason=refusal.reason)
    await abort_with(context, refusal)
