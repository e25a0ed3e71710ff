"""The pace of the node's background loops: a tick every period until the node stops."""
from __future__ import annotations

import asyncio
from typing import AsyncIterator


async def every(period: float, stop: asyncio.Event) -> AsyncIterator[None]:
    """Yield once per `period` seconds; end as soon as `stop` is set, even mid-wait."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), period)
            return
        except TimeoutError:
            yield
