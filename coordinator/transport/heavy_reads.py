"""Reads whose cost grows with the stored state, kept off the event loop.

A WhatIf over a large dependency history takes seconds of pure Python; run on the
event loop, sixteen of them delayed an honest heartbeat by tens of seconds, long
enough for its lease to expire and force a recovery. Here such reads run on a few
worker threads: the loop keeps answering heartbeats between them (the interpreter
switches threads every few milliseconds), at most WORKERS of them compute at once,
and beyond MAX_WAITING queued ones a new one is refused as an overload
(RESOURCE_EXHAUSTED, REASON_OVERLOADED and a retry hint: it did nothing, so a client
retries it after the hint) rather than queued without end.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import grpc

from coordinator.core.errors import Rejection
from coordinator.core.overload import Shed
from coordinator.transport.admission import refuse
from coordinator.transport.status_map import abort_with

T = TypeVar("T")
WORKERS = 2
MAX_WAITING = 32
# A refused heavy read's retry hint: about what the queue ahead of it takes to drain
# when its reads are a few milliseconds each (clients spread it over 1-1.5x).
RETRY_AFTER_S = 0.05
# A read of at most this many records (all it scans, not the page it returns) runs on the event loop:
# it costs less than the hop to a worker thread and back, and it is neither queued
# behind heavy reads nor refused with them.
INLINE_RECORDS = 64


class HeavyReads:
    def __init__(self, workers: int = WORKERS, max_waiting: int = MAX_WAITING) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="raftpoint-read")
        self._running = asyncio.Semaphore(workers)
        self._max_waiting = max_waiting
        self._waiting = 0

    async def run(self, context: grpc.aio.ServicerContext, read: Callable[[], T], records: int | None = None) -> T:
        """`read()` on a worker thread, or here when it reads at most INLINE_RECORDS
        records (`records`: its bound, None when unbounded); a Rejection it raises ends
        the RPC with its status."""
        if records is not None and records <= INLINE_RECORDS:
            try:
                return read()
            except Rejection as r:
                await abort_with(context, r)
        if self._waiting >= self._max_waiting:
            await refuse(context, Shed(f"{self._waiting} heavy reads queued", RETRY_AFTER_S))
        self._waiting += 1
        try:
            await self._running.acquire()
        finally:
            self._waiting -= 1
        try:
            # A cancelled RPC releases its slot; its read finishes on the pool, whose
            # size still bounds how many compute at once.
            return await asyncio.get_running_loop().run_in_executor(self._pool, read)
        except Rejection as r:
            await abort_with(context, r)
        finally:
            self._running.release()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
