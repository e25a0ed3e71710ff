"""AgentClient: what an agent links to checkpoint, message and recover consistently.

Messages go through wrap()/unwrap(): unwrap delivers each message once, applies the
group's rule (a higher epoch or the CIC protocol may force a checkpoint *before*
delivery, through the agent's snapshot callback), reports the dependency, refuses
orphans and logs the message for re-delivery after a rollback. checkpoint() writes
the blob first and commits metadata second, so a crash in between leaves only an
unreferenced blob. restore() says why it returns what it returns. The agent's calls,
keepalives and orders share one session stream (agent_stream.py; `transport="unary"`
makes them separate calls). Two daemon threads (background.py) send keepalives and
carry out orders: a rollback restores the named
checkpoint, calls on_rollback(state, reason), acknowledges, then re-delivers what the
rollback forgot through on_redeliver(payload, sender).

All protocol decisions live in protocol.py (shared with the asyncio client); this
module only performs their effects with blocking calls. See protocol.py for the
orphan and re-delivery rules, and the window dependency_batch > 1 opens.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from agent_client.agent_stream import SessionStream, carries
from agent_client.background import START_UP_GRACE_S, KeepaliveSender, OrderWatcher, PushedOrders
from agent_client.blobstore import BlobStore
from agent_client.client_base import ClientBase
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.effects import Effect, ProtocolOperation, Rpc, drive, operation_span, perform_blocking
from agent_client.restored import Restored, RestoreKind
from agent_client.state_codec import config_hash
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger("agent_client")
T = TypeVar("T")


class AgentClient(ClientBase):
    """The blocking client (constructor arguments: ClientBase); thread-safe."""

    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | str | Path,
                 **options: Any) -> None:
        super().__init__(group, agent_id, endpoints, blob_store, **options)
        self.conn = Connection(self.endpoints, deadline=self.deadline, token=self.token, tls=self.tls)
        self.stream = (SessionStream(self.conn, self._pushed, self._watch_ended)
                       if self.transport == "session" else None)
        self._lock = threading.RLock()
        self._threads: list[KeepaliveSender | OrderWatcher | PushedOrders] = []
        self._orders: PushedOrders | None = None
        # Clear from register() until the agent's next call: see _handle_order.
        self._started = threading.Event()

    # ---- effects ----------------------------------------------------------------------
    def _perform(self, effect: Effect) -> Any:
        if self.stream is not None and isinstance(effect, Rpc) and carries(effect.service, effect.method):
            return self.stream.call(effect.method, effect.request)
        return perform_blocking(self.conn, effect)

    def _run(self, op: ProtocolOperation[T], *, registering: bool = False, span: str = "") -> T:
        with self._lock:
            mark = self._mark()
            try:
                with operation_span(span, self.core.group, self.core.agent_id):
                    return drive(op, self._perform)
            finally:
                self._settle_effects(mark)
                if registering:
                    self._started.clear()
                else:
                    self._started.set()

    # ---- lifecycle --------------------------------------------------------------------
    def register(self) -> pb.RegisterResponse:
        """A new incarnation; if this agent was alive, the coordinator treats the old one
        as crashed and computes a recovery line. Call restore() next."""
        resp = self._run(self.core.register(), registering=True)
        if self.background:
            self.start_background()
        return resp

    def start_background(self) -> None:
        if self._threads:
            self._watch()  # a new incarnation: its orders, not the old one's
            return
        beats = KeepaliveSender(self.keepalive, self.keepalive_every(), self._fence)
        if self.stream is None:
            self._threads = [beats, OrderWatcher(self._open_watch, self.conn.redirect, self._handle_order,
                                                 self._fence)]
        else:
            self._orders = PushedOrders(self._handle_order, self._watch)
            self._threads = [beats, self._orders]
            self._watch()
        for thread in self._threads:
            thread.start()

    def _watch(self) -> None:
        if self.stream is not None:
            self.stream.watch(self.core.watch_request())

    def _pushed(self, order: pb.Order) -> None:
        if self._orders is not None:
            self._orders.push(order)

    def _fence(self, reason: str) -> None:
        """A newer incarnation exists (or we were declared failed): stop acting on orders."""
        self.core.fence(reason)
        for thread in self._threads:
            thread.stop()

    def keepalive(self) -> pb.HeartbeatResponse:
        return drive(self.core.keepalive(), self._perform)  # no lock: it only reads the token

    def close(self, *, deregister: bool = False) -> None:
        self._started.set()  # a watcher waiting for the start-up returns and sees it is stopped
        for thread in self._threads:
            thread.stop()
        self._threads = []
        try:
            self._run(self.core.close(deregister=deregister))
        except (Rejected, CoordinatorUnavailable) as exc:
            log.warning("close: %s", exc)
        finally:
            self._close_stores()
            if self.stream is not None:
                self.stream.close()
            self.conn.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def atomic(self) -> threading.RLock:
        """Hold it around wrap()/unwrap() *and* the state change that goes with them, so a
        checkpoint or rollback carried out by the order thread never sees a message
        sent or received without its effect on the state, or the reverse."""
        return self._lock

    # ---- protocol operations ----------------------------------------------------------
    def restore(self, meta: pb.CheckpointMeta | None = None, reason: str | None = None) -> Restored:
        """Load `meta` (default: where Register said to resume) and reset the client's
        protocol state to it. A rejected checkpoint changes nothing and says why."""
        return self._run(self.core.restore(meta, reason), span="raftpoint.restore")

    def checkpoint(self, state: Any = None, *, forced_index: int | None = None, epoch: int | None = None) -> int:
        """Write the blob, then commit the metadata; returns the checkpoint index."""
        return self._run(self.core.checkpoint(state, forced_index=forced_index, epoch=epoch), span="raftpoint.checkpoint")

    def wrap(self, payload: bytes, to: str) -> bytes:
        """The envelope to send instead of `payload`."""
        with self._lock:
            self._started.set()  # the agent is at work: its orders may be carried out
            return self.core.wrap(payload, to)

    def unwrap(self, envelope: bytes) -> bytes | None:
        """The payload, or None for a duplicate or an orphan (see `duplicates`, `orphans`)."""
        return self._run(self.core.unwrap(envelope))

    def flush_dependencies(self) -> None:
        self._run(self.core.flush_dependencies())

    def pending_orders(self, window: float = 0.5) -> list[pb.Order]:
        return self._run(self.core.pending_orders(window))

    def obey(self, order: pb.Order) -> Restored | None:
        """Carry out an order and acknowledge it; a rollback returns what was restored."""
        return self._run(self.core.obey(order), span="raftpoint.obey")

    def sync_orders(self, window: float = 0.5) -> list[pb.Order]:
        """Carry out the orders pending now (e.g. right after restore(), before the first
        write, which the coordinator refuses while a rollback order is unacknowledged)."""
        return self._run(self.core.sync_orders(window))

    # ---- side effects -----------------------------------------------------------------
    def side_effect(self, key: str, fn: Callable[[], Any], *, hold_until_stable: bool = False) -> Any:
        """Run fn() at most once per key, across crashes and rollbacks; with
        hold_until_stable, only once the checkpoint covering this point is stable."""
        return self._side_effect(key, fn, hold_until_stable)

    # ---- orders from the background thread --------------------------------------------
    def _open_watch(self, timeout: float) -> tuple[Any, Any]:
        return self.conn.stream("AgentService", "WatchOrders", self.core.watch_request(), timeout=timeout)

    def _handle_order(self, order: pb.Order) -> None:
        """Carry out a watched order, but not between register() and the agent's next call
        (restore() and sync_orders() under atomic(), as the start-up goes): an order
        obeyed in between would be undone by the restore that follows, and the messages
        its rollback re-delivered lost. Pushed orders arrive within milliseconds of Register."""
        give_up = time.monotonic() + START_UP_GRACE_S  # an agent that only waits for orders gets them
        while not self._started.wait(0.5) and time.monotonic() < give_up:
            if self.core.fenced:
                return
        if self.core.wants(order) and self._threads:
            self.obey(order)


__all__ = ["AgentClient", "CoordinatorUnavailable", "Rejected", "RestoreKind", "Restored", "config_hash"]
