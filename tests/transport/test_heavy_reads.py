"""Reads that cost seconds run off the event loop: heartbeats keep their latency meanwhile,
and beyond the queue's bound a heavy read is refused instead of queued."""
from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.metadata import REASON_METADATA_KEY, RETRY_AFTER_METADATA_KEY, parse_reason
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import queries
from coordinator.transport.heavy_reads import INLINE_RECORDS, HeavyReads

READ_S = 3.0  # long against a heartbeat even on a loaded machine


def test_a_heartbeat_is_answered_while_slow_what_ifs_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    real_plan = queries.plan_for

    computing = threading.Event()

    def slow_plan(*args, **kwargs):
        computing.set()
        time.sleep(READ_S)  # holds its thread, as seconds of pure-Python planning do
        return real_plan(*args, **kwargs)
    monkeypatch.setattr(queries, "plan_for", slow_plan)

    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        incarnation = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, 
            request_id="r", group="g", agent_id="a")).incarnation
        with ThreadPoolExecutor(2) as pool:
            what_ifs = [pool.submit(conn.call, "AdminService", "WhatIf", pb.WhatIfRequest(group="g", failed=["a"]))
                        for _ in range(2)]
            assert computing.wait(20), "no what-if reached the server"  # the heartbeat must not wait for them
            started = time.perf_counter()
            conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(
                group="g", agent_id="a", token=pb.FencingToken(secret=b"s" * 16, incarnation=incarnation)))
            heartbeat_s = time.perf_counter() - started
            assert not what_ifs[0].done() and not what_ifs[1].done(), "the heartbeat was answered after a what-if"
            assert [t.agent_id for t in what_ifs[0].result(30).targets] == ["a"]
    assert heartbeat_s < READ_S / 2, f"the heartbeat waited {heartbeat_s:.2f}s behind the what-ifs"


class _Context:
    def __init__(self) -> None:
        self.aborted: grpc.StatusCode | None = None
        self.trailers: dict[str, str] = {}

    def set_trailing_metadata(self, trailers: tuple[tuple[str, str], ...]) -> None:
        self.trailers.update(trailers)

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = code
        raise RuntimeError(details)


async def test_heavy_reads_beyond_the_queue_bound_are_refused_and_small_reads_are_never_queued() -> None:
    """With the one worker busy and the queue full: a heavy read is refused as an
    overload (RESOURCE_EXHAUSTED, REASON_OVERLOADED and a retry hint: clients retry it),
    one of at most INLINE_RECORDS records runs on the loop at once."""
    release = threading.Event()
    heavy = HeavyReads(workers=1, max_waiting=1)
    try:
        running = asyncio.create_task(heavy.run(_Context(), lambda: release.wait(10)))
        queued = asyncio.create_task(heavy.run(_Context(), lambda: True))
        await asyncio.sleep(0.05)
        refused = _Context()
        with pytest.raises(RuntimeError, match="queued"):
            await heavy.run(refused, threading.get_ident, records=INLINE_RECORDS + 1)
        assert refused.aborted is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert parse_reason(refused.trailers.get(REASON_METADATA_KEY)) == pb.REASON_OVERLOADED, refused.trailers
        assert float(refused.trailers[RETRY_AFTER_METADATA_KEY]) > 0, refused.trailers
        light = _Context()
        ran_on = await asyncio.wait_for(heavy.run(light, threading.get_ident, records=INLINE_RECORDS), 1)
        assert (ran_on, light.aborted) == (threading.get_ident(), None), \
            "a small read waited for, or was refused with, heavy ones"
        release.set()
        assert await asyncio.wait_for(running, 10) is True and await asyncio.wait_for(queued, 10) is True
    finally:
        release.set()
        heavy.close()


def test_cluster_status_computes_the_digests_once_per_applied_index() -> None:
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        computed: list[int] = []
        real = coordinator.replica.digest_with_index

        def counted() -> tuple[int, str]:
            computed.append(1)
            return real()
        coordinator.replica.digest_with_index = counted  # type: ignore[method-assign]

        def status() -> pb.NodeStatus:
            return conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest()).node
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS)))
        first, second = status(), status()
        assert len(computed) == 1 and first.content_digest == second.content_digest
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg2", spec=pb.GroupSpec(group="h", mode=pb.CIC_BCS)))
        third = status()
        assert len(computed) == 2 and third.digest_index == first.digest_index + 1
        assert third.content_digest != first.content_digest
