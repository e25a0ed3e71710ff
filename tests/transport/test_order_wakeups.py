"""Which applied writes wake which order stream, and what a woken stream reads."""
from __future__ import annotations

import asyncio
import threading

from coordinator.core.model import Agent, Order, OrderKind
from coordinator.storage import keys
from coordinator.storage.state import AGENT, ORDER, agent_changes
from coordinator.transport.order_wakeups import OrderWakeups


def test_an_order_write_names_its_agent_and_an_agent_write_its_record() -> None:
    writes = {
        keys.key(ORDER, "g", 7): Order("g", "b", 7, OrderKind.ROLL_BACK),
        keys.key(ORDER, "g", 8): None,  # acknowledged and deleted: nobody to wake
        keys.key(AGENT, "g", "a"): Agent("g", "a", incarnation=2),
        keys.key("c", "g", "a", 3): object(),  # a checkpoint: not an order stream's business
    }
    assert sorted(agent_changes(writes), key=str) == [("g", "a", None), ("g", "b", 7)]


def test_a_subscription_reads_everything_first_then_only_what_it_was_woken_for() -> None:
    async def run() -> list[object]:
        hub = OrderWakeups(asyncio.get_running_loop())
        seen: list[object] = []
        with hub.subscribe("g", "a") as sub, hub.subscribe("g", "other") as other:
            seen.append(sub.take())  # None: the first read takes all the agent's orders
            assert not sub.event.is_set()
            # From the replica's thread, as after a commit: one hop to the loop.
            t = threading.Thread(target=hub.signal, args=([("g", "a", 4), ("g", "a", None), ("g", "x", 5)],))
            t.start()
            t.join()
            await asyncio.wait_for(sub.wait(), 5)
            seen.append(sub.take())  # the order named, and the agent record to re-check
            seen.append(other.event.is_set())
            hub.signal(None)  # the state was replaced: everyone reads everything
            await asyncio.wait_for(other.wait(), 5)
            seen.append(other.take())
        seen.append(hub._subs)  # every subscription is gone with its block
        return seen

    assert asyncio.run(run()) == [None, {4}, False, None, {}]


def test_losing_the_lead_wakes_every_stream_and_tells_every_session() -> None:
    async def run() -> tuple[set[int] | None, int]:
        hub = OrderWakeups(asyncio.get_running_loop())
        leading = [True]
        lost: list[int] = []
        stop = asyncio.Event()
        with hub.subscribe("g", "a") as sub, hub.leadership_watch(lambda: lost.append(1)):
            sub.take()
            follower = asyncio.create_task(hub.follow_leadership(lambda: leading[0], stop))
            await asyncio.sleep(0)
            leading[0] = False
            await asyncio.wait_for(sub.wait(), 5)
            stop.set()
            await follower
            return sub.take(), len(lost)

    assert asyncio.run(run()) == (None, 1)


def delivery_count() -> float:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("raftpoint_rollback_delivery_seconds_count") or 0.0


def test_a_rollback_order_woken_for_is_timed_from_its_commit_and_one_read_first_is_not() -> None:
    async def run() -> tuple[float, float]:
        from prometheus_client import REGISTRY
        hub = OrderWakeups(asyncio.get_running_loop())
        with hub.subscribe("g", "a") as sub:
            sub.take()
            sub.rollbacks_sent([3])  # on the first read: there before the stream, not timed
            before = delivery_count(), REGISTRY.get_sample_value("raftpoint_rollback_delivery_seconds_sum") or 0.0
            hub.signal([("g", "a", 4), ("g", "a", 5)])
            await asyncio.wait_for(sub.wait(), 5)
            await asyncio.sleep(0.05)  # the push comes this late after the commit
            assert sub.take() == {4, 5}
            sub.rollbacks_sent([4])  # 5 is another kind of order: the caller leaves it out
            sub.rollbacks_sent([4])  # sent once, timed once
            after = delivery_count(), REGISTRY.get_sample_value("raftpoint_rollback_delivery_seconds_sum") or 0.0
        return after[0] - before[0], after[1] - before[1]

    count, seconds = asyncio.run(run())
    assert count == 1 and seconds >= 0.05, (count, seconds)


def test_a_rollback_order_pushed_on_an_open_stream_is_timed() -> None:
    """End to end: b's stream is open (it has received one order) when a's second restart
    rolls b back again; that order's push is timed."""
    import itertools

    from agent_client.connection import Connection
    from agent_client.testing import InProcessCoordinator
    from coordinator.api.v1 import coordinator_pb2 as pb

    token = lambda incarnation: pb.FencingToken(secret=b"s" * 16, incarnation=incarnation)  # noqa: E731
    request_ids = itertools.count(1)
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as conn:
        def register(agent: str) -> pb.RegisterResponse:
            return conn.call("AgentService", "Register", pb.RegisterRequest(
                secret=b"s" * 16, request_id=f"reg-{next(request_ids)}", group="g", agent_id=agent))

        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        for agent in ("a", "b"):
            register(agent)
            conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"cp-{agent}", token=token(1), checkpoint=pb.CheckpointMeta(
                    group="g", agent_id=agent, index=1, kind=pb.BASIC, blob_uri=f"file:///blobs/{agent}/1",
                    sha256="c" * 64, size=1)))
        conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
            request_id="dep", group="g", agent_id="b", token=token(1), records=[pb.DependencyRecord(
                sender="a", send_interval=2, receiver="b", receive_interval=2, message_id="m1", send_generation=1)]))
        call, orders = conn.stream("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group="g", agent_id="b", token=token(1)), timeout=30)
        try:
            register("a")  # b received a send a's rollback undoes: b rolls back
            first = next(orders)
            assert first.WhichOneof("kind") == "roll_back"
            before = delivery_count()  # b's stream is open now, whether or not it was at that commit
            register("a")  # again: b still owes its acknowledgement, so it rolls back again
            second = next(orders)
            assert second.WhichOneof("kind") == "roll_back" and second.order_id != first.order_id
            assert delivery_count() == before + 1, f"rollback deliveries timed: {delivery_count() - before}"
        finally:
            call.cancel()
