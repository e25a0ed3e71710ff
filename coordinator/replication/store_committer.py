"""Committing store batches (the writes a node applied, handed over in one go) to the
store on a thread of their own.

Raft acknowledges a write once a majority's journals hold its entry and it is
applied; the store's durable commit (LMDB, two fdatasyncs) is the node's own
business, and the journal covers it until then. So the Raft thread hands each
applied batch over here and goes on: it answers the batch's proposals and starts
the next round while the batch is committed, instead of after. Batches handed over
while a commit runs are merged into the next one (group commit).

What was handed over but is not yet in the store stays readable: `layers` holds
those batches, oldest first, as one immutable tuple that is replaced, never changed.
A reader takes the tuple, then reads the store: a batch leaves the tuple only after
its commit is visible to new store reads, so every applied write is seen in one or
the other (storage.state.RecordCache).

A commit that carries entries of traced proposals is a span of its own,
`raftpoint.store`, linked to their server spans (tracing.linked): the answer went
out before it, so it cannot be their child.

A commit that fails (disk full, I/O error) calls `on_failure`, which stops the node:
the batches it held are committed in Raft and replayed from the journal at the next
start. Everything that needs the store whole (a snapshot written or installed, the
node closed) first waits for the committer to be idle (`drain`).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from coordinator import tracing
from coordinator.storage.protocol import Store
from coordinator.storage.state import Writes, encode_writes

log = logging.getLogger(__name__)


class StoreCommitter:
    def __init__(self, store: Store, on_failure: Callable[[Exception], None]) -> None:
        self._store = store
        self._on_failure = on_failure
        self.layers: tuple[Writes, ...] = ()  # handed over, not yet in the store; oldest first
        self.handed_index = store.applied_index  # the applied index of the last batch handed over
        self._queue: list[tuple[int, Writes, tuple[tracing.SpanRef, ...]]] = []
        self._busy = False
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="raftpoint-store-commit", daemon=True)
        self._thread.start()

    def hand_over(self, applied_index: int, writes: Writes, spans: tuple[tracing.SpanRef, ...] = ()) -> None:
        """Queue a store batch applied up to `applied_index`; readable at once through `layers`.
        `spans`: of the traced proposals whose entries it holds."""
        with self._cond:
            self._queue.append((applied_index, writes, spans))
            self.layers = self.layers + (writes,)
            self.handed_index = applied_index
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every batch handed over is in the store (or the committer stopped)."""
        with self._cond:
            while (self._queue or self._busy) and not self._stopped:
                self._cond.wait()

    def reset(self, applied_index: int) -> None:
        """After the store's content was replaced wholesale (drained first)."""
        with self._cond:
            self.handed_index = applied_index

    def close(self) -> None:
        self.drain()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                batches, self._queue = self._queue, []
                self._busy = True
            merged: Writes = {}
            spans: list[tracing.SpanRef] = []
            for _, writes, batch_spans in batches:
                merged.update(writes)
                spans.extend(batch_spans)
            applied_index = batches[-1][0]
            try:
                with tracing.linked("raftpoint.store", spans, **{"raftpoint.applied_index": applied_index,
                                                               "raftpoint.store_batches": len(batches)}):
                    self._store.commit(encode_writes(merged), applied_index)
            except Exception as exc:  # the store can no longer be trusted to follow the log
                with self._cond:
                    self._stopped, self._busy = True, False
                    self._cond.notify_all()
                try:
                    self._on_failure(exc)  # ends the process
                except Exception:
                    log.exception("the store commit failed, and so did stopping the node")
                return
            with self._cond:
                self.layers = self.layers[len(batches):]
                self._busy = False
                self._cond.notify_all()
