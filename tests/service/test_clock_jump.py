"""An hour's step of the leader's wall clock, either way, while agents heartbeat and write.

Before leases ran on the monotonic clock and proposals on the leader clock, +1 h
declared every heartbeating agent failed at the next tick (and b, silent, never at -1 h) and pushed the replicated
dedupe watermark an hour ahead, so every write was refused as too old for good;
-1 h paused failure detection. Now the step changes nothing: no refusal at all.
"""
from __future__ import annotations

import time

import pytest

from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.in_process import InProcessCoordinator
from coordinator.replication.leader_clock import LeaderClock

LEASE_TTL_S = 2.0  # a loaded machine can stall a heartbeat round for most of a second


class SteppedWall:
    """The leader's wall clock, which the test steps; the client keeps the true time."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.mark.slow
@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_step_of_the_leaders_clock_fails_no_agent_and_refuses_no_write(step: float) -> None:
    wall = SteppedWall()
    with InProcessCoordinator(clock=LeaderClock(wall)) as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=LEASE_TTL_S)))
        incarnation = conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, 
            request_id="reg-a", group="g", agent_id="a")).incarnation
        conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="reg-b", group="g", agent_id="b"))
        token = pb.FencingToken(secret=b"s" * 16, incarnation=incarnation)

        def commit(index: int) -> None:
            conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"cp-{index}", token=token, checkpoint=pb.CheckpointMeta(
                    group="g", agent_id="a", index=index, kind=pb.BASIC, blob_uri=f"file:///b/{index}",
                    sha256="c" * 64, size=1)), deadline=2)

        def live_for(seconds: float, first_index: int) -> None:
            """Heartbeat well within the lease and commit a checkpoint on every beat."""
            end, index = time.monotonic() + seconds, first_index
            while time.monotonic() < end:
                conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(group="g", agent_id="a", token=token))
                commit(index)
                index += 1
                time.sleep(LEASE_TTL_S / 5)

        def states() -> dict[str, int]:
            agents = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g")).agents
            return {agent.agent_id: agent.state for agent in agents}

        live_for(0.5, 1)
        wall.offset = step
        # Three leases long: a lease measured on the stepped clock would have run out
        # (a's, +1 h) or never would (b's, -1 h; b went silent before the step).
        live_for(3 * LEASE_TTL_S, 100)
        assert states() == {"a": pb.AGENT_ALIVE, "b": pb.AGENT_FAILED}
        wall.offset = 0.0  # the operator fixes the clock
        live_for(0.5, 200)
        assert states()["a"] == pb.AGENT_ALIVE
        assert coordinator.clock is not None and coordinator.clock.stepped_by == 0
