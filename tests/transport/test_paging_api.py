"""ListCheckpoints and GetGroup answer in pages that together hold everything once."""
from __future__ import annotations

import grpc
import pytest

from agent_client.connection import Connection, Rejected
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb


def test_list_checkpoints_and_get_group_page_through_everything() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=600, retention=10)))
        expected = set()
        for agent in ("a", "b", "c"):
            inc = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, 
                request_id=f"r-{agent}", group="g", agent_id=agent)).incarnation
            for index in (1, 2):
                conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                    request_id=f"cp-{agent}-{index}", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc),
                    checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                                                 blob_uri=f"file:///b/{agent}/{index}", sha256="c" * 64, size=1)))
                expected.add((agent, index))

        seen, token, pages = [], "", 0
        while True:
            answer = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
                group="g", page_size=4, page_token=token))
            seen += [(c.agent_id, c.index) for c in answer.checkpoints]
            pages += 1
            token = answer.next_page_token
            if not token:
                break
        assert pages == 2 and seen == sorted(expected)
        everything = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g"))
        assert len(everything.checkpoints) == 6 and not everything.next_page_token

        first = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g", page_size=2))
        second = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(
            group="g", page_size=2, page_token=first.next_page_token))
        assert [a.agent_id for a in first.agents] == ["a", "b"] and [a.agent_id for a in second.agents] == ["c"]
        assert not second.next_page_token and second.group.spec.group == "g"

        with pytest.raises(Rejected) as info:
            conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", page_size=5000))
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and info.value.reason.startswith("page_size")


def test_list_groups_and_list_savepoints_page_through_everything() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        for group in ("g1", "g2", "g3"):
            conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                request_id=f"cg-{group}", spec=pb.GroupSpec(group=group, mode=pb.UNCOORDINATED)))
        inc = conn.call("AgentService", "Register", pb.RegisterRequest(
            secret=b"s" * 16, request_id="r-a", group="g1", agent_id="a")).incarnation
        conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id="cp-a-1", token=pb.FencingToken(secret=b"s" * 16, incarnation=inc),
            checkpoint=pb.CheckpointMeta(group="g1", agent_id="a", index=1, kind=pb.BASIC, blob_uri="file:///b/a/1",
                                         sha256="c" * 64, size=1)))
        for name in ("s3", "s1", "s2"):
            conn.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
                request_id=f"sp-{name}", group="g1", name=name))

        for method, request, items, name_of, expected in (
                ("ListGroups", pb.ListGroupsRequest(page_size=2), "groups", lambda g: g.spec.group, ["g1", "g2", "g3"]),
                ("ListSavepoints", pb.ListSavepointsRequest(group="g1", page_size=2), "savepoints",
                 lambda sp: sp.name, ["s1", "s2", "s3"])):
            first = conn.call("AdminService", method, request)
            request.page_token = first.next_page_token
            second = conn.call("AdminService", method, request)
            names = [name_of(x) for x in (*getattr(first, items), *getattr(second, items))]
            assert names == expected and first.next_page_token and not second.next_page_token, (method, names)


def test_list_dependencies_pages_through_every_record_in_key_order() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=600)))
        for agent in ("a", "b"):
            conn.call("AgentService", "Register", pb.RegisterRequest(
                secret=b"s" * 16, request_id=f"r-{agent}", group="g", agent_id=agent))
        for n, (sender, receiver, ids) in enumerate((("a", "b", ("m3", "m1")), ("b", "a", ("m2",)),
                                                      ("a", "b", ("m0",)))):
            conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
                request_id=f"dep-{n}", group="g", agent_id=receiver,
                token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
                records=[pb.DependencyRecord(sender=sender, send_interval=1, receiver=receiver,
                                             receive_interval=1 + (i == "m0"), message_id=i) for i in ids]))

        seen, token, pages = [], "", 0
        while True:
            answer = conn.call("AdminService", "ListDependencies", pb.ListDependenciesRequest(
                group="g", page_size=2, page_token=token))
            seen += [(d.receiver, d.receive_interval, d.message_id, d.sender) for d in answer.dependencies]
            pages += 1
            token = answer.next_page_token
            if not token:
                break
        assert pages == 2 and seen == [("a", 1, "m2", "b"), ("b", 1, "m1", "a"), ("b", 1, "m3", "a"),
                                       ("b", 2, "m0", "a")], seen

        for bad in ("b/1", "b/x/m1", "b/1/m 1"):
            with pytest.raises(Rejected) as info:
                conn.call("AdminService", "ListDependencies", pb.ListDependenciesRequest(group="g", page_token=bad))
            assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and "page_token" in info.value.reason, bad
        with pytest.raises(Rejected) as info:
            conn.call("AdminService", "ListDependencies", pb.ListDependenciesRequest(group="nope"))
        assert info.value.code is grpc.StatusCode.NOT_FOUND
