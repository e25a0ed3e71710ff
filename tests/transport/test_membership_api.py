"""AddNode/RemoveNode refusals that need no cluster: a bad address, and a coordinator
without Raft membership (the in-process one)."""
from __future__ import annotations

import grpc
import pytest

from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc


@pytest.mark.parametrize("method", ["AddNode", "RemoveNode"])
def test_membership_rpcs_refuse_a_bad_address_and_need_raft(method: str) -> None:
    with InProcessCoordinator() as coordinator, coordinator.client_tls().channel(coordinator.address) as channel:
        call = getattr(pb_grpc.AdminServiceStub(channel), method)
        with pytest.raises(grpc.RpcError) as bad:
            call(pb.MembershipRequest(node="not an address"), timeout=5)
        with pytest.raises(grpc.RpcError) as no_raft:
            call(pb.MembershipRequest(node="127.0.0.1:7000", grpc="127.0.0.1:7001"), timeout=5)
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(bad.value.trailing_metadata())[REASON_METADATA_KEY] == "REASON_INVALID_FIELD"
    assert no_raft.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_add_node_refuses_a_host_label_too_long_to_resolve_as_an_invalid_field() -> None:
    """It was checked only when dialled (pysyncobj's probe: UnicodeError, status UNKNOWN)."""
    with InProcessCoordinator() as coordinator, coordinator.client_tls().channel(coordinator.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.AdminServiceStub(channel).AddNode(pb.MembershipRequest(node="n" * 64 + ".example:7000"),
                                                      timeout=5)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert dict(refused.value.trailing_metadata())[REASON_METADATA_KEY] == "REASON_INVALID_FIELD"
    assert "node" in (refused.value.details() or "")


class _Aborted(Exception):
    pass


class _Context:
    """The little of grpc.aio.ServicerContext a membership change uses."""

    def __init__(self) -> None:
        self.trailers: tuple = ()
        self.code: grpc.StatusCode | None = None

    def time_remaining(self) -> None:
        return None

    def set_trailing_metadata(self, trailers) -> None:
        self.trailers = tuple(trailers)

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        raise _Aborted(details)


class _Node:
    """A leader of three whose Raft decides every change with `outcome`."""

    def __init__(self, outcome) -> None:
        from types import SimpleNamespace

        self.outcome = outcome
        self.config = SimpleNamespace(grpc_of=lambda raft: "127.0.0.1:9002" if raft else None)
        self.proposed: list[str] = []

    def is_leader(self) -> bool:
        return True

    def leader_raft_address(self) -> str:
        return "127.0.0.1:7002"

    def voters(self):
        members = frozenset({"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"})
        return members, members

    def probe_member(self, raft_address: str, timeout: float) -> None:
        return None

    def change_membership(self, raft_address: str, *, add: bool, callback) -> None:
        self.proposed.append(raft_address)
        callback(self.outcome, "DISCARDED")

    def tick_lag_since(self, since: float) -> float:
        return 0.0


@pytest.mark.parametrize("outcome, code", [("NOT_APPLIED", grpc.StatusCode.UNAVAILABLE),
                                           ("UNKNOWN", grpc.StatusCode.UNAVAILABLE),
                                           ("REFUSED", grpc.StatusCode.FAILED_PRECONDITION)])
async def test_a_change_a_leader_change_discarded_is_answered_as_retryable(outcome: str, code) -> None:
    """A removal that a leader change kept from being applied is UNAVAILABLE, naming the
    leader, so the client sends it again there; one whose fate is unknown is UNAVAILABLE
    without a leader (look first); one Raft refused stays a refusal."""
    from types import SimpleNamespace

    from coordinator.replication.replica import MembershipOutcome
    from coordinator.transport import membership
    from coordinator.transport.proposer import Proposer

    node = _Node(MembershipOutcome[outcome])
    context = _Context()
    with pytest.raises(_Aborted):
        await membership.change(Proposer(SimpleNamespace(replica=node)), context,
                                pb.MembershipRequest(node="127.0.0.1:7000", force=True), add=False)
    assert node.proposed == ["127.0.0.1:7000"] and context.code is code
    # Only a change known never to have been applied names the leader to send it to again.
    assert (("raftpoint-leader", "127.0.0.1:9002") in context.trailers) is (outcome == "NOT_APPLIED")


def test_pysyncobj_reasons_map_to_what_the_caller_may_do() -> None:
    from pysyncobj import FAIL_REASON

    from coordinator.replication.node import _membership_outcome
    from coordinator.replication.replica import MembershipOutcome

    assert _membership_outcome(FAIL_REASON.SUCCESS) is MembershipOutcome.APPLIED
    for never_applied in (FAIL_REASON.MISSING_LEADER, FAIL_REASON.DISCARDED, FAIL_REASON.NOT_LEADER):
        assert _membership_outcome(never_applied) is MembershipOutcome.NOT_APPLIED
    for unknown in (FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME):
        assert _membership_outcome(unknown) is MembershipOutcome.UNKNOWN
    for refused in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.REQUEST_DENIED):
        assert _membership_outcome(refused) is MembershipOutcome.REFUSED
