"""AgentClient: what an agent links to checkpoint, message and recover consistently.

Messages go through wrap()/unwrap(): unwrap delivers each message once, applies the
group's rule (a higher epoch or the CIC protocol may force a checkpoint *before*
delivery, through the agent's snapshot callback), reports the dependency, refuses
orphans and logs the message for re-delivery after a rollback. checkpoint() writes
the blob first and commits metadata second, so a crash in between leaves only an
unreferenced blob. restore() says why it returns what it returns. Two daemon threads
(background.py) send heartbeats and carry out orders: a rollback restores the named
checkpoint, calls on_rollback(state, reason), acknowledges, then re-delivers what the
rollback forgot through on_redeliver(payload, sender).

All protocol decisions live in protocol.py (shared with the asyncio client); this
module only performs their effects with blocking calls. See protocol.py for the
orphan and re-delivery rules, and the window dependency_batch > 1 opens.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from agent_client.background import Heartbeater, OrderWatcher
from agent_client.blobstore import BlobStore, LocalBlobStore, PutResult
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.delivery_log import DeliveryLog, LoggedDelivery
from agent_client.protocol import (
    AgentProtocol, Blocking, Callback, Effect, Op, Restored, RestoreKind, Rpc, Watch, drive,
)
from agent_client.side_effects import SideEffectLog
from agent_client.state_codec import config_hash
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger("agent_client")
T = TypeVar("T")
DELIVERY_LOG = "deliveries.jsonl"
SIDE_EFFECTS = "side_effects.sqlite"


def _view(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.core, name), doc=doc)


class ClientBase:
    """What the sync and asyncio clients share besides the protocol: read-only views
    of its state, and the side-effect log that follows it (held effects run once their
    checkpoint is stable and are dropped by a rollback)."""

    core: AgentProtocol
    state_dir: Path | None
    _effects: SideEffectLog | None = None
    group = _view("group", "the agent's group")
    agent_id = _view("agent_id", "this agent")
    mode = _view("mode", "the group's checkpointing mode (pb.GroupMode)")
    incarnation = _view("incarnation", "issued by Register; a newer one fences this one off")
    generation = _view("generation", "stamped on every message; rises with each registration and rollback")
    epoch = _view("epoch", "the newest epoch this agent has heard of")
    cut_epoch = _view("cut_epoch", "coordinated mode: the epoch of this agent's last cut")
    stable_epoch = _view("stable_epoch", "coordinated mode: the newest stable epoch")
    lease_ttl_s = _view("lease_ttl_s", "the group's lease")
    last_index = _view("last_index", "the agent's last checkpoint index")
    forced = _view("forced", "checkpoints a rule forced before a delivery")
    duplicates = _view("duplicates", "envelopes not delivered because they already were")
    orphans = _view("orphans", "envelopes not delivered because their sender's rollback undid the send")
    orphans_delivered = _view("orphans_delivered", "orphans found only after delivery (dependency_batch > 1)")
    redelivered = _view("redelivered", "(message id, receive interval) re-delivered after the last rollback")
    fenced = _view("fenced", "why the coordinator refuses this incarnation, once it does")
    last_restore = _view("last_restore", "what the last restore or rollback returned")
    rollbacks = _view("rollbacks", "every rollback carried out, in order")

    def in_transit(self, after_checkpoint: int) -> list[LoggedDelivery]:
        """Coordinated mode: the channel state of the cut at `after_checkpoint`."""
        return self.core.in_transit(after_checkpoint)

    def _effect_log(self) -> SideEffectLog:
        if self._effects is None:
            if self.state_dir is None:
                raise ValueError("side effects need state_dir (the blob store is not a local directory)")
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._effects = SideEffectLog(self.state_dir / SIDE_EFFECTS)
        return self._effects

    def _held_until(self) -> Callable[[], bool]:
        covering = self.core.last_index + 1
        return lambda: self.core.is_stable(covering)

    def _mark(self) -> tuple[int, int]:
        return len(self.core.rollbacks), self.core.last_index

    def _settle_effects(self, mark: tuple[int, int]) -> None:
        """After an operation: a rollback drops held effects; a new checkpoint may release some."""
        if self._effects is None:
            return
        if len(self.core.rollbacks) != mark[0]:
            self._effects.discard_held()
        if self.core.last_index != mark[1]:
            self._effects.release()


def open_stores(blob_store: BlobStore | str | Path, state_dir: str | Path | None, group: str, agent_id: str,
                aead_key: bytes | None) -> tuple[BlobStore, Path | None]:
    """The blob store, and the directory for the agent's logs (default: next to the
    blobs of a local store; none for another store unless given)."""
    if isinstance(blob_store, (str, Path)):
        return LocalBlobStore(blob_store, key=aead_key), Path(state_dir or Path(blob_store) / "agents" / group / agent_id)
    return blob_store, None if state_dir is None else Path(state_dir)


class AgentClient(ClientBase):
    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | str | Path, *,
                 snapshot: Callable[[], Any], on_rollback: Callable[[Any, str], None] | None = None,
                 on_redeliver: Callable[[bytes, str], None] | None = None,
                 members: Sequence[str] = (), schema_version: int = 1, config: Mapping[str, object] | None = None,
                 aead_key: bytes | None = None, state_dir: str | Path | None = None, dependency_batch: int = 1,
                 fsync_deliveries: bool = False, background: bool = True, heartbeat_interval: float | None = None,
                 deadline: float = 30.0, after_blob_write: Callable[[PutResult], None] | None = None,
                 after_commit: Callable[[pb.CheckpointMeta], None] | None = None) -> None:
        """`snapshot()` returns the agent's state (bytes or JSON); `on_rollback(state, reason)`
        replaces the agent's live state after a rollback order; `on_redeliver(payload,
        sender)` then applies each message the rollback took out of the state and its
        sender will not send again. `state_dir` holds the delivery and side-effect logs
        (default: <blob dir>/agents/<group>/<agent>; without one the delivery log is in
        memory and a crashed agent cannot re-deliver). `fsync_deliveries` makes each
        delivery survive a power loss, not only a crash of the process.
        `after_blob_write` and `after_commit` are test hooks around the metadata commit."""
        self.conn = Connection(endpoints, deadline=deadline)
        self.blobs, self.state_dir = open_stores(blob_store, state_dir, group, agent_id, aead_key)
        deliveries = DeliveryLog(None if self.state_dir is None else self.state_dir / DELIVERY_LOG,
                                 fsync=fsync_deliveries)
        self.core = AgentProtocol(group, agent_id, blobs=self.blobs, deliveries=deliveries, snapshot=snapshot,
                                  on_rollback=on_rollback, on_redeliver=on_redeliver, members=members,
                                  schema_version=schema_version, config_hash=config_hash(config or {}),
                                  dependency_batch=dependency_batch, after_blob_write=after_blob_write,
                                  after_commit=after_commit)
        self.background = background
        self.heartbeat_interval = heartbeat_interval  # default: a third of the group's lease
        self._lock = threading.RLock()
        self._threads: list[Heartbeater | OrderWatcher] = []

    # ---- effects ----------------------------------------------------------------------
    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Rpc):
            return self.conn.call(effect.service, effect.method, effect.request)
        if isinstance(effect, Watch):
            return self.conn.collect("AgentService", "WatchOrders", effect.request, window=effect.window)
        if isinstance(effect, (Blocking, Callback)):
            return effect.fn()
        raise TypeError(f"unknown effect {effect!r}")

    def _run(self, op: Op[T]) -> T:
        with self._lock:
            mark = self._mark()
            try:
                return drive(op, self._perform)
            finally:
                self._settle_effects(mark)

    # ---- lifecycle --------------------------------------------------------------------
    def register(self) -> pb.RegisterResponse:
        """A new incarnation; if this agent was alive, the coordinator treats the old one
        as crashed and computes a recovery line. Call restore() next."""
        resp = self._run(self.core.register())
        if self.background:
            self.start_background()
        return resp

    def start_background(self) -> None:
        if self._threads:
            return
        interval = self.heartbeat_interval or min(5.0, max(0.1, (self.core.lease_ttl_s or 3.0) / 3))
        self._threads = [Heartbeater(self.heartbeat, interval, self._fence),
                         OrderWatcher(self._open_watch, self.conn.redirect, self._handle_order)]
        for thread in self._threads:
            thread.start()

    def _fence(self, reason: str) -> None:
        """A newer incarnation exists (or we were declared failed): stop acting on orders."""
        self.core.fence(reason)
        for thread in self._threads:
            thread.stop()

    def heartbeat(self) -> pb.HeartbeatResponse:
        return drive(self.core.heartbeat(), self._perform)  # no lock: it only reads the token

    def close(self, *, deregister: bool = False) -> None:
        for thread in self._threads:
            thread.stop()
        self._threads = []
        try:
            self._run(self.core.close(deregister=deregister))
        except (Rejected, CoordinatorUnavailable) as exc:
            log.warning("close: %s", exc)
        finally:
            if self._effects is not None:
                self._effects.close()
            self.core.deliveries.close()
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
        return self._run(self.core.restore(meta, reason))

    def checkpoint(self, state: Any = None, *, forced_index: int | None = None, epoch: int | None = None) -> int:
        """Write the blob, then commit the metadata; returns the checkpoint index."""
        return self._run(self.core.checkpoint(state, forced_index=forced_index, epoch=epoch))

    def wrap(self, payload: bytes, to: str) -> bytes:
        """The envelope to send instead of `payload`."""
        with self._lock:
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
        return self._run(self.core.obey(order))

    def sync_orders(self, window: float = 0.5) -> list[pb.Order]:
        """Carry out the orders pending now (e.g. right after restore(), before the first
        write, which the coordinator refuses while a rollback order is unacknowledged)."""
        return self._run(self.core.sync_orders(window))

    # ---- side effects -----------------------------------------------------------------
    def side_effect(self, key: str, fn: Callable[[], Any], *, hold_until_stable: bool = False) -> Any:
        """Run fn() at most once per key, across crashes and rollbacks; with
        hold_until_stable, only once the checkpoint covering this point is stable."""
        effects = self._effect_log()
        if not hold_until_stable:
            return effects.run(key, fn)
        return effects.hold_until_stable(key, fn, self._held_until())

    # ---- orders from the background thread --------------------------------------------
    def _open_watch(self, timeout: float) -> tuple[Any, Any]:
        return self.conn.stream("AgentService", "WatchOrders", self.core.watch_request(), timeout=timeout)

    def _handle_order(self, order: pb.Order) -> None:
        if order.order_id in self.core.handled_orders or self.core.fenced:
            return
        self.obey(order)


__all__ = ["AgentClient", "CoordinatorUnavailable", "Rejected", "RestoreKind", "Restored", "config_hash"]
