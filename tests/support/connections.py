"""A well-behaved client's call on a connection of its own, for tests of a node's connection limits."""
from __future__ import annotations

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS

PLAIN = ClientTLS.plaintext()


def status_on_a_new_connection(address: str, n: int) -> str:
    """ClusterStatus on a plaintext connection no earlier channel shares (distinct
    channel arguments, `n`): "OK" or the status code's name."""
    with PLAIN.channel(address, options=[("raftpoint.test.connection", n)]) as channel:
        try:
            pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name
