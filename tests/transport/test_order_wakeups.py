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
