"""Request ids through the gRPC API, on a node that authenticates its callers: each
identity's ids are its own, so another identity using one neither reads the answer
it holds nor blocks the command sent under it, and an identity that reuses an id for
another command is refused (REASON_REQUEST_ID_REUSED), never told it succeeded."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
import pytest

from coordinator.api.metadata import REASON_METADATA_KEY, bearer
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.harness.in_process import LocalReplica
from coordinator.harness.local_cluster import free_ports, node_status
from coordinator.service import node_server
from coordinator.transport.auth import Authorizer, add_token

# Two agent identities of group "g": "wa" acts for agents a*, "wb" for agents b*.
BINDINGS = '''
["boss"]
role = "admin"

["wa"]
role = "agent"
group = "g"
pattern = "a*"

["wb"]
role = "agent"
group = "g"
pattern = "b*"
'''
A_SECRET, B_SECRET = b"a" * 16, b"b" * 16


class Node:
    def __init__(self, address: str, replica: LocalReplica, tokens: dict[str, str]) -> None:
        self.address, self.replica, self.tokens = address, replica, tokens

    async def call(self, who: str, method: str, request: Any) -> Any:
        """The response, or the grpc.aio.AioRpcError that refused the call."""
        service = "AdminService" if method in ("CreateGroup", "GetGroup") else "AgentService"
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = getattr(pb_grpc, f"{service}Stub")(channel)
            try:
                return await getattr(stub, method)(request, timeout=10, metadata=bearer(self.tokens[who]))
            except grpc.aio.AioRpcError as err:
                return err

    async def ok(self, who: str, method: str, request: Any) -> Any:
        response = await self.call(who, method, request)
        assert not isinstance(response, grpc.aio.AioRpcError), (who, method, response.code(), response.details())
        return response

    async def agents(self) -> dict[str, int]:
        """Each agent of group g and its incarnation."""
        group = await self.ok("boss", "GetGroup", pb.GetGroupRequest(group="g"))
        return {a.agent_id: a.incarnation for a in group.agents}


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    bindings, tokens_file = tmp_path / "bindings.toml", tmp_path / "tokens"
    bindings.write_text(BINDINGS)
    tokens = {who: add_token(tokens_file, who) for who in ("boss", "wa", "wb")}
    address = f"127.0.0.1:{free_ports(1)[0]}"
    replica, stop = LocalReplica(address), asyncio.Event()
    serving = asyncio.create_task(node_server.serve(replica, address, stop,
                                                    authorizer=Authorizer(str(bindings), str(tokens_file))))
    deadline = time.monotonic() + 20
    while await asyncio.to_thread(node_status, address, 1.0, ClientTLS.plaintext(), tokens["boss"]) is None:
        assert time.monotonic() < deadline and not serving.done(), "the node never answered its status"
        await asyncio.sleep(0.05)
    try:
        yield Node(address, replica, tokens)
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


def register(rid: str, agent: str, secret: bytes) -> pb.RegisterRequest:
    return pb.RegisterRequest(request_id=rid, group="g", agent_id=agent, secret=secret)


async def test_each_identity_has_its_own_request_ids(node: Node) -> None:
    await node.ok("boss", "CreateGroup", pb.CreateGroupRequest(
        request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
    await node.ok("wa", "Register", register("a1-first", "a1", A_SECRET))
    await node.ok("wa", "CommitCheckpoint", pb.CommitCheckpointRequest(
        request_id="a1-cp-1", token=pb.FencingToken(incarnation=1, secret=A_SECRET),
        checkpoint=pb.CheckpointMeta(group="g", agent_id="a1", index=1, kind=pb.BASIC,
                                     blob_uri="file:///blobs/a1/1", sha256="c" * 64, size=10)))
    # A's re-registration answers with where a1 resumes: what no other identity may read.
    mine = await node.ok("wa", "Register", register("reg-x", "a1", A_SECRET))
    assert mine.incarnation == 2 and mine.resume_from.index == 1, mine

    # B replays A's request id with its own command: B's command is applied and B is
    # answered for it, not with A's answer.
    theirs = await node.call("wb", "Register", register("reg-x", "b1", B_SECRET))
    assert not isinstance(theirs, grpc.aio.AioRpcError), (theirs.code(), theirs.details())
    assert theirs != mine and not theirs.HasField("resume_from"), f"B was given A's answer: {theirs}"
    assert await node.agents() == {"a1": 2, "b1": 1}, "B's registration was not applied"

    # A's retry still gets A's answer, and is not applied again.
    assert await node.ok("wa", "Register", register("reg-x", "a1", A_SECRET)) == mine
    assert await node.agents() == {"a1": 2, "b1": 1}

    # B takes an id first; A's command under the same id is still applied.
    await node.ok("wb", "Register", register("reg-y", "b2", B_SECRET))
    await node.ok("wa", "Register", register("reg-y", "a2", A_SECRET))
    assert await node.agents() == {"a1": 2, "a2": 1, "b1": 1, "b2": 1}, "A's registration was silently skipped"

    # A reusing its own id for another command is refused, and nothing is applied.
    before = node.replica.state_digest()
    err = await node.call("wa", "Register", register("reg-x", "a3", A_SECRET))
    assert isinstance(err, grpc.aio.AioRpcError), f"a reused request id was answered: {err}"
    assert err.code() is grpc.StatusCode.ALREADY_EXISTS, (err.code(), err.details())
    assert dict(err.trailing_metadata() or ()).get(REASON_METADATA_KEY) == "REASON_REQUEST_ID_REUSED", err.details()
    assert node.replica.state_digest() == before and "a3" not in await node.agents()
