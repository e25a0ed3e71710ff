"""AgentClient: what an agent links to checkpoint, message and recover consistently.

Messages go through wrap()/unwrap(): unwrap delivers each message id once, applies
the group's rule (a higher epoch or the CIC protocol may force a checkpoint *before*
delivery, through the agent's snapshot callback), and records the dependency the
coordinator needs for recovery lines. By default the dependency is reported before
the payload is handed over (dependency_batch=1): a dependency the coordinator has not
heard of when the sender crashes is an orphan it cannot roll back. A larger batch
trades that window for fewer RPCs.

checkpoint() writes the blob first and commits metadata second, so a crash in
between leaves only an unreferenced blob. restore() says why it returns what it
returns. Two daemon threads (background.py) send heartbeats and carry out orders:
a rollback restores the named checkpoint and calls on_rollback before acknowledging.
"""
from __future__ import annotations

import enum
import logging
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_client import checkpoint_blob
from agent_client.background import Heartbeater, OrderWatcher
from agent_client.blobstore import BlobStore, LocalBlobStore, Manifest, PutResult
from agent_client.channel_log import ChannelLog, LoggedMessage
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.envelope import Envelope
from agent_client.restore_check import CheckpointRejected, RejectReason, load_verified
from agent_client.rules import Rule, rule_for
from agent_client.side_effects import SideEffectLog
from agent_client.state_codec import config_hash
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import cic

log = logging.getLogger("agent_client")
REMEMBERED_IDS = 10_000  # delivered message ids kept (and checkpointed) for duplicate detection


class RestoreKind(enum.Enum):
    COLD_START = "cold start"
    RESUME = "resume"
    ROLLBACK = "rollback order"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Restored:
    state: Any  # the agent's state (bytes or JSON value) or None
    index: int
    reason: str  # "cold start: ...", "resume from checkpoint N", "rollback order ...", "rejected: <why>: ..."
    kind: RestoreKind = RestoreKind.RESUME
    rejected: RejectReason | None = None


class AgentClient:
    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | str | Path, *,
                 snapshot: Callable[[], Any], on_rollback: Callable[[Any, str], None] | None = None,
                 members: Sequence[str] = (), schema_version: int = 1, config: Mapping[str, object] | None = None,
                 aead_key: bytes | None = None, state_dir: str | Path | None = None, dependency_batch: int = 1,
                 background: bool = True, heartbeat_interval: float | None = None, deadline: float = 30.0,
                 after_blob_write: Callable[[PutResult], None] | None = None) -> None:
        """`snapshot()` returns the agent's state (bytes or JSON); `on_rollback(state, reason)`
        replaces the agent's live state after a rollback order. `state_dir` holds the
        channel and side-effect logs (default: <blob dir>/agents/<group>/<agent>).
        `after_blob_write` is a test hook: it runs between the blob write and the commit."""
        self.group, self.agent_id = group, agent_id
        self.conn = Connection(endpoints, deadline=deadline)
        if isinstance(blob_store, (str, Path)):
            self.blobs: BlobStore = LocalBlobStore(blob_store, key=aead_key)
            state_dir = state_dir or Path(blob_store) / "agents" / group / agent_id
        else:
            self.blobs = blob_store
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.snapshot, self.on_rollback = snapshot, on_rollback
        self.members = list(members)
        self.schema_version = schema_version
        self.config_hash = config_hash(config or {})
        self.dependency_batch = max(1, dependency_batch)
        self.background = background
        self.heartbeat_interval = heartbeat_interval  # default: a third of the group's lease
        self.after_blob_write = after_blob_write
        self.incarnation = self.epoch = self.cut_epoch = self.stable_epoch = 0
        self.lease_ttl_s = 0.0
        self.mode = pb.GROUP_MODE_UNSPECIFIED
        self.last_index = 0
        self.forced = 0
        self.fenced: str | None = None  # why the coordinator refuses this incarnation, once it does
        self.last_restore: Restored | None = None
        self.rollbacks: list[Restored] = []
        self._rule: Rule = Rule()
        self._seq = 0
        self._delivered: dict[str, int] = {}  # message id -> receive interval
        self._pending: list[pb.DependencyRecord] = []
        self._resume: pb.CheckpointMeta | None = None
        self._manifest: Manifest | None = None
        self._cut_index: dict[int, int] = {}  # coordinated: epoch -> our checkpoint index for it
        self._handled_orders: set[int] = set()
        # Request ids must be unique across groups, agents and client instances (the
        # coordinator answers a known id from its dedupe table without applying it)
        # and stable across retries of one write: a per-client session id plus a key.
        self._session = uuid.uuid4().hex[:20]
        self._deps_batches = 0
        self._pending_rid: tuple[str, int] | None = None
        self._refused_epoch = 0
        self._progress = self._progress_at_restore = 0  # messages and checkpoints since the last restore
        self._lock = threading.RLock()
        self._channel: ChannelLog | None = None
        self._effects: SideEffectLog | None = None
        self._threads: list[Heartbeater | OrderWatcher] = []

    # ---- lifecycle --------------------------------------------------------------------
    def register(self) -> pb.RegisterResponse:
        """A new incarnation; if this agent was alive, the coordinator treats the old one
        as crashed and computes a recovery line. Call restore() next."""
        resp = self.conn.call("AgentService", "Register", pb.RegisterRequest(
            request_id=self._rid("reg", uuid.uuid4().hex[:8]), group=self.group, agent_id=self.agent_id))
        with self._lock:
            self.incarnation, self.epoch, self.mode = resp.incarnation, resp.current_epoch, resp.mode
            self.stable_epoch, self.lease_ttl_s = resp.stable_epoch, resp.lease_ttl_s
            self._resume = resp.resume_from if resp.HasField("resume_from") else None
            self._rule = rule_for(self.mode, self.agent_id, self.members)
            self.fenced = None
        if self.background:
            self.start_background()
        return resp

    def start_background(self) -> None:
        if self._threads:
            return
        interval = self.heartbeat_interval or min(5.0, max(0.1, (self.lease_ttl_s or 3.0) / 3))
        self._threads = [Heartbeater(self.heartbeat, interval, self._fence),
                         OrderWatcher(self._open_watch, self.conn.redirect, self._handle_order)]
        for thread in self._threads:
            thread.start()

    def _fence(self, reason: str) -> None:
        """A newer incarnation exists (or we were declared failed): stop acting on orders."""
        self.fenced = reason
        log.error("agent %s incarnation %d is fenced off: %s", self.agent_id, self.incarnation, reason)
        for thread in self._threads:
            thread.stop()

    def _rid(self, op: str, key: object) -> str:
        return f"{op}-{self._session}-{self.incarnation}-{key}"

    def _seq_deps(self) -> int:
        self._deps_batches += 1
        return self._deps_batches

    def token(self) -> pb.FencingToken:
        return pb.FencingToken(incarnation=self.incarnation, epoch=self.epoch)

    def close(self, *, deregister: bool = False) -> None:
        for thread in self._threads:
            thread.stop()
        self._threads = []
        try:
            self.flush_dependencies()
            if deregister:
                self.conn.call("AgentService", "Deregister", pb.DeregisterRequest(
                    request_id=self._rid("dereg", ""), group=self.group,
                    agent_id=self.agent_id, token=self.token()))
        except (Rejected, CoordinatorUnavailable) as exc:
            log.warning("close: %s", exc)
        finally:
            if self._effects is not None:
                self._effects.close()
            self.conn.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def atomic(self) -> threading.RLock:
        """Hold it around wrap()/unwrap() *and* the state change that goes with them, so a
        checkpoint ordered by the coordinator (taken on the order thread) never sees a
        message sent or received without its effect on the state, or the reverse."""
        return self._lock

    def _dir(self) -> Path:
        if self.state_dir is None:
            raise ValueError("this needs state_dir (the blob store is not a local directory)")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return self.state_dir

    # ---- restore ----------------------------------------------------------------------
    def restore(self, meta: pb.CheckpointMeta | None = None, reason: str | None = None) -> Restored:
        """Load `meta` (default: where Register said to resume) and reset the client's
        protocol state to it. A rejected checkpoint changes nothing and says why."""
        meta = meta if meta is not None else self._resume
        if meta is None or meta.index == 0:
            with self._lock:
                self._reset_to(0, {}, None)
            return self._remember(Restored(None, 0, reason or "cold start: no checkpoint to resume from",
                                           RestoreKind.COLD_START))
        try:
            data = load_verified(self.blobs, meta, expected_schema=self.schema_version,
                                 expected_config_hash=self.config_hash)
            client, state = checkpoint_blob.unpack(data, expected_schema=self.schema_version)
        except CheckpointRejected as exc:
            return self._remember(Restored(None, meta.index, f"rejected: {exc.reason.value}: {exc.detail}",
                                           RestoreKind.REJECTED, exc.reason))
        except checkpoint_blob.BlobFormatError as exc:
            return self._remember(Restored(None, meta.index, f"rejected: {RejectReason.SCHEMA_MISMATCH.value}: {exc}",
                                           RestoreKind.REJECTED, RejectReason.SCHEMA_MISMATCH))
        with self._lock:
            self._reset_to(meta.index, client, meta)
        kind = RestoreKind.ROLLBACK if reason and reason.startswith("rollback") else RestoreKind.RESUME
        return self._remember(Restored(state, meta.index, reason or f"resume from checkpoint {meta.index}", kind))

    def _remember(self, restored: Restored) -> Restored:
        self.last_restore = restored
        self._progress_at_restore = self._progress
        return restored

    def _reset_to(self, index: int, client: Mapping[str, Any], meta: pb.CheckpointMeta | None) -> None:
        self.last_index = index
        self._rule = rule_for(self.mode, self.agent_id, self.members)
        self._rule.load_json(client.get("rule"), index)
        self._delivered = {i: 0 for i in client.get("delivered", [])}
        self._pending, self._pending_rid = [], None
        self._manifest = None
        if self.mode == pb.COORDINATED:
            self.cut_epoch = int(client.get("cut_epoch", meta.epoch if meta else 0))
            self._cut_index = {e: i for e, i in self._cut_index.items() if i <= index}

    # ---- checkpoints ------------------------------------------------------------------
    def checkpoint(self, state: Any = None, *, forced_index: int | None = None, epoch: int | None = None) -> int:
        """Write the blob, then commit the metadata; returns the checkpoint index.
        Coordinated groups cut for `epoch` (default: the open epoch)."""
        with self._lock:
            value = self.snapshot() if state is None else state
            if self.mode == pb.COORDINATED:
                kind, index = pb.COORDINATED_CUT, self.last_index + 1
                cut = self.epoch if epoch is None else epoch
            else:
                kind = pb.FORCED if forced_index is not None else pb.BASIC
                index, cut = max(self.last_index + 1, forced_index or 0), self.epoch
            self.flush_dependencies()
            client = {"rule": self._rule.to_json(), "cut_epoch": cut,
                      "delivered": list(self._delivered)[-REMEMBERED_IDS:]}
            data = checkpoint_blob.pack(client, value, schema_version=self.schema_version)
            blob = self.blobs.put(data, parent=self._manifest)
            if self.after_blob_write is not None:
                self.after_blob_write(blob)
            resp = self.conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=self._rid("cp", f"{index}-{blob.sha256[:16]}"),
                token=pb.FencingToken(incarnation=self.incarnation, epoch=max(self.epoch, cut)),
                checkpoint=pb.CheckpointMeta(group=self.group, agent_id=self.agent_id, index=index, epoch=cut,
                                             kind=kind, blob_uri=blob.uri, sha256=blob.sha256, size=blob.size,
                                             schema_version=self.schema_version, config_hash=self.config_hash)))
            self.last_index, self._manifest = index, blob.manifest
            self._progress += 1
            self._rule.on_checkpoint(index)
            if self.mode == pb.COORDINATED:
                self.cut_epoch, self.epoch = cut, max(self.epoch, cut)
                self._cut_index[cut] = index
            self._note_stable(resp.stable_epoch)
            return index

    def _note_stable(self, stable_epoch: int) -> None:
        """Channel state and held output behind a stable cut can never be rolled back."""
        self.stable_epoch = max(self.stable_epoch, stable_epoch)
        if self._channel is not None and self.stable_epoch in self._cut_index:
            self._channel.truncate(self._cut_index[self.stable_epoch])
        if self._effects is not None:
            self._effects.release()

    # ---- messages ---------------------------------------------------------------------
    def wrap(self, payload: bytes, to: str) -> bytes:
        """The envelope to send instead of `payload`."""
        with self._lock:
            self._seq += 1
            self._progress += 1
            message_id = f"{self.agent_id[:80]}.{self.incarnation}.{self._seq}.{uuid.uuid4().hex[:8]}"
            return Envelope(message_id, self.agent_id, self.last_index + 1, self.cut_epoch,
                            self._rule.on_send(to), payload).encode()

    def unwrap(self, data: bytes) -> bytes | None:
        """The payload, or None for a duplicate. May checkpoint first (forced)."""
        env = Envelope.decode(data)
        with self._lock:
            if env.message_id in self._delivered:
                return None
            if self.mode == pb.COORDINATED:
                self._coordinated_receive(env)
            else:
                forced = self._rule.forced_index(env.sender, env.piggyback, self.last_index)
                if forced is not None:
                    self.forced += 1
                    self.checkpoint(forced_index=forced)  # kind FORCED; BCS may jump the index
            self._rule.on_deliver(env.sender, env.piggyback)
            receive_interval = self.last_index + 1
            self._progress += 1
            self._delivered[env.message_id] = receive_interval
            self._pending.append(pb.DependencyRecord(sender=env.sender, send_interval=env.send_interval,
                                                     receiver=self.agent_id, receive_interval=receive_interval,
                                                     message_id=env.message_id))
            if len(self._pending) >= self.dependency_batch:
                self.flush_dependencies()
            if len(self._delivered) > 2 * REMEMBERED_IDS:
                self._delivered = dict(list(self._delivered.items())[-REMEMBERED_IDS:])
            return env.payload

    def _coordinated_receive(self, env: Envelope) -> None:
        """Lai-Yang: cut before delivering a message from a later epoch; log a message
        from an earlier one as channel state (it crossed our cut in transit)."""
        if cic.epoch_forces_cut(self.cut_epoch, env.epoch) and env.epoch > self._refused_epoch:
            try:
                self.epoch = max(self.epoch, env.epoch)
                self.checkpoint(epoch=env.epoch)
                self.forced += 1
            except Rejected as exc:  # the epoch was aborted (or never opened here): nothing to cut for
                log.info("no cut for epoch %d: %s", env.epoch, exc.reason)
                self._refused_epoch = env.epoch
        elif cic.is_channel_state(self.cut_epoch, env.epoch):
            self.channel_log().record(env.message_id, env.sender, env.payload, env.epoch,
                                      after_checkpoint=self.last_index)

    def channel_log(self) -> ChannelLog:
        if self._channel is None:
            self._channel = ChannelLog(self._dir() / "channel.log")
        return self._channel

    def channel_state(self, after_checkpoint: int) -> list[LoggedMessage]:
        """In-transit messages recorded after `after_checkpoint`: what to re-deliver
        after rolling back to it (coordinated mode)."""
        if self.state_dir is None:
            return []
        return self.channel_log().replay(after_checkpoint, sent_before_epoch=self.cut_epoch)  # survives a crash

    def flush_dependencies(self) -> None:
        """Report pending dependency records. A batch keeps its request id until it is
        accepted, and records added meanwhile go in the next batch, so a retry after an
        unknown outcome is the very same write (applied once)."""
        with self._lock:
            while self._pending:
                if self._pending_rid is None:
                    self._pending_rid = (self._rid("deps", self._seq_deps()), len(self._pending))
                rid, n = self._pending_rid
                self.conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
                    request_id=rid, group=self.group, agent_id=self.agent_id, token=self.token(),
                    records=self._pending[:n]))
                self._pending, self._pending_rid = self._pending[n:], None

    # ---- side effects -----------------------------------------------------------------
    def side_effect(self, key: str, fn: Callable[[], Any], *, hold_until_stable: bool = False) -> Any:
        """Run fn() at most once per key, across crashes and rollbacks; with
        hold_until_stable, only once the checkpoint covering this point is stable."""
        if self._effects is None:
            self._effects = SideEffectLog(self._dir() / "side_effects.sqlite")
        if not hold_until_stable:
            return self._effects.run(key, fn)
        covering = self.last_index + 1
        return self._effects.hold_until_stable(key, fn, lambda: self._is_stable(covering))

    def _is_stable(self, index: int) -> bool:
        if self.mode != pb.COORDINATED:
            return self.last_index >= index
        return any(i >= index and e <= self.stable_epoch for e, i in self._cut_index.items())

    # ---- orders -----------------------------------------------------------------------
    def _open_watch(self, timeout: float) -> tuple[Any, Any]:
        return self.conn.stream("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group=self.group, agent_id=self.agent_id, token=self.token()), timeout=timeout)

    def _handle_order(self, order: pb.Order) -> None:
        if order.order_id in self._handled_orders or self.fenced:
            return
        self.obey(order)

    def pending_orders(self, window: float = 0.5) -> list[pb.Order]:
        return self.conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group=self.group, agent_id=self.agent_id, token=self.token()), window=window)

    def obey(self, order: pb.Order) -> Restored | None:
        """Carry out an order and acknowledge it; a rollback returns what was restored.
        A rollback whose checkpoint is rejected is not acknowledged: the agent cannot
        honestly claim to be at the recovery line."""
        restored = None
        log.info("order %d for %s: %s", order.order_id, self.agent_id, order.WhichOneof("kind"))
        with self._lock:
            if order.order_id in self._handled_orders:  # sync_orders() and the watcher may race
                return None
            kind = order.WhichOneof("kind")
            if kind == "roll_back":
                restored = self._roll_back(order)
                if restored is not None and restored.kind is RestoreKind.REJECTED:
                    log.error("rollback order %d not obeyed: %s", order.order_id, restored.reason)
                    return restored
                if restored is not None and self.on_rollback is not None:
                    self.on_rollback(restored.state, restored.reason)  # under the lock, before the ack
            elif kind == "checkpoint_now":
                self._checkpoint_now(order.checkpoint_now.epoch)
            self.conn.call("AgentService", "AckOrder", pb.AckOrderRequest(
                request_id=self._rid("ack", order.order_id), group=self.group,
                agent_id=self.agent_id, token=self.token(), order_id=order.order_id))
            self._handled_orders.add(order.order_id)
        return restored

    def _roll_back(self, order: pb.Order) -> Restored | None:
        """None: the agent is already there (a restart that resumed from this point)."""
        index = order.roll_back.checkpoint_index
        why = f"rollback order {order.order_id} (recovery {order.roll_back.recovery_id}) to checkpoint {index}"
        if self._already_at(index):
            return None
        if index == 0:
            with self._lock:
                self._reset_to(0, {}, None)
            restored = Restored(None, 0, why, RestoreKind.ROLLBACK)
        else:
            metas = self.conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
                group=self.group, agent_id=self.agent_id)).checkpoints
            meta = next((m for m in metas if m.index == index), None)
            if meta is None:
                return Restored(None, index, f"rejected: {RejectReason.MISSING_BLOB.value}: checkpoint {index} "
                                f"is not registered", RestoreKind.REJECTED, RejectReason.MISSING_BLOB)
            restored = self.restore(meta, why)
        if restored.kind is not RestoreKind.REJECTED:
            self.rollbacks.append(restored)
            if self._effects is not None:
                self._effects.discard_held()
        return self._remember(restored)

    def _already_at(self, index: int) -> bool:
        """A restarted agent restores its resume point before it sees the rollback order
        naming that same point: it only has to acknowledge it."""
        last = self.last_restore
        return (last is not None and last.kind is not RestoreKind.REJECTED and last.index == index
                and self._progress == self._progress_at_restore)

    def sync_orders(self, window: float = 0.5) -> list[pb.Order]:
        """Carry out the orders pending now (e.g. right after restore(), before the first
        write, which the coordinator refuses while a rollback order is unacknowledged)."""
        orders = [o for o in self.pending_orders(window) if o.order_id not in self._handled_orders]
        for order in orders:
            self.obey(order)
        return orders

    def _checkpoint_now(self, epoch: int) -> None:
        if self.mode == pb.COORDINATED and self.cut_epoch >= epoch:
            return  # already cut for it (forced by a message from that epoch)
        self.epoch = max(self.epoch, epoch)
        try:
            self.checkpoint(epoch=epoch)
        except Rejected as exc:
            if "already committed" not in exc.reason and "not the open epoch" not in exc.reason:
                raise
            log.info("checkpoint for epoch %d not needed: %s", epoch, exc.reason)

    def heartbeat(self) -> pb.HeartbeatResponse:
        resp = self.conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(
            group=self.group, agent_id=self.agent_id, token=self.token()))
        return resp


__all__ = ["AgentClient", "CoordinatorUnavailable", "Rejected", "RestoreKind", "Restored", "config_hash"]
