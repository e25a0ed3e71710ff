"""The agent's side of the raftpoint protocol, without I/O (sans-I/O).

Every decision AgentClient (agent.py) and AsyncAgentClient (aio.py) make is made
here, once: what to piggyback, whether a message is a duplicate, whether a checkpoint
must come before a delivery, which dependency to report and what a refusal means,
what a checkpoint blob holds, whether a restore is acceptable, what an order
requires, and which logged messages to re-deliver after a rollback.

Operations that need the outside world are generators. They yield an effect -- an
RPC, a blocking local call (blob store, delivery log), a user callback -- and are
resumed with its result, or have its exception thrown in at the yield (effects.py
holds the effect types and the loops that run an operation). Neither shell holds
protocol logic, so the two cannot drift apart. Callers serialise operations (the
shells hold a lock around each): the state here is not thread-safe on its own.

Orphans. Every envelope carries the sender's generation; the receiver reports the
dependency before it delivers (dependency_batch=1) and the coordinator refuses a
record whose send a rollback of the sender undid. unwrap() then returns None, as
for a duplicate, and counts the message in `orphans`. With dependency_batch > 1 the
payload is handed over before the report, so a message whose sender rolls back in
that window is delivered as an orphan: the refusal comes at the next flush, which
logs it and counts it in `orphans_delivered` (the agent's state now depends on an
undone send; restarting the agent makes the coordinator roll it back consistently).

Re-delivery. Every delivered message is logged (delivery_log.py). A rollback order
carries the whole recovery line; after restoring and acknowledging, the client
re-delivers, through the normal unwrap path, each logged message received after the
restored checkpoint whose send the line kept, and hands it to on_redeliver(payload,
sender). Senders never re-send; receivers never lose a message. A rollback ordered
before the last one's re-deliveries are done replaces them: the log keeps their
records until all are made, and the new rollback re-delivers from it.
"""
from __future__ import annotations

import logging
import secrets
from functools import partial
from typing import Any, Callable, Mapping, Sequence

from agent_client import checkpoint_blob
from agent_client.blobs.manifest import Manifest
from agent_client.blobs.store import BlobStore
from agent_client.connection import Rejected
from agent_client.delivered import DeliveredSet
from agent_client.delivery_log import DeliveryLog, LoggedDelivery
from agent_client.effects import Blocking, Callback, ProtocolOperation, Rpc, Watch
from agent_client.envelope import Envelope
from agent_client.replay import RunStart
from agent_client.request_ids import RequestIds
from agent_client.restore_check import CheckpointRejected, RejectReason, load_verified
from agent_client.restored import Restored, RestoreKind
from agent_client.rules import Rule, rule_for
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import agent_secret, cic, fences
from coordinator.core.model import Fence

log = logging.getLogger("agent_client")
MAX_REDELIVERY_ROUNDS = 3  # a delivery refused because a rollback is owed: obey, then try again


def is_orphan_refusal(exc: Rejected) -> bool:
    return exc.reason_code == pb.REASON_ORPHAN_MESSAGE


def owes_rollback(exc: Rejected) -> bool:
    return exc.reason_code == pb.REASON_ORDER_PENDING


# A checkpoint_now for an epoch this agent already cut, or one that closed meanwhile.
_EPOCH_CUT_NOT_NEEDED = frozenset({pb.REASON_ALREADY_COMMITTED, pb.REASON_NOT_OPEN_EPOCH})


def undone_by(line: Mapping[str, Fence], envelope: Envelope) -> bool:
    """Whether the recovery line (each agent's rollback as a fence) undid this send."""
    fence = line.get(envelope.sender)
    return fence is not None and fences.undoing((fence,), envelope.generation, envelope.send_interval) is not None


# ---- the protocol ---------------------------------------------------------------------

class AgentProtocol:
    def __init__(self, group: str, agent_id: str, *, blobs: BlobStore, deliveries: DeliveryLog,
                 snapshot: Callable[[], Any], on_rollback: Callable[[Any, str], Any] | None = None,
                 on_redeliver: Callable[[bytes, str], Any] | None = None, members: Sequence[str] = (),
                 schema_version: int = 1, config_hash: str = "", dependency_batch: int = 1,
                 after_blob_write: Callable[[Any], Any] | None = None,
                 after_commit: Callable[[pb.CheckpointMeta], Any] | None = None,
                 before_ack: Callable[[pb.Order], Any] | None = None) -> None:
        self.group, self.agent_id = group, agent_id
        self.blobs, self.deliveries = blobs, deliveries
        self.snapshot, self.on_rollback, self.on_redeliver = snapshot, on_rollback, on_redeliver
        self.members = list(members)
        self.schema_version, self.config_hash = schema_version, config_hash
        self.dependency_batch = max(1, dependency_batch)
        self.after_blob_write, self.after_commit, self.before_ack = after_blob_write, after_commit, before_ack
        self.incarnation = self.generation = self.epoch = self.cut_epoch = self.stable_epoch = 0
        # This incarnation's registration secret (see register()); never persisted.
        self.secret = b""
        self.lease_ttl_s = 0.0
        self.mode = pb.GROUP_MODE_UNSPECIFIED
        self.last_index = 0
        self.forced = 0  # checkpoints a rule forced before a delivery
        self.duplicates = 0  # envelopes not delivered because they already were
        self.orphans = 0  # envelopes not delivered because their send was undone
        self.orphans_delivered = 0  # ... found only after delivery (dependency_batch > 1)
        self.redelivered: list[tuple[str, int]] = []  # (message id, receive interval) re-delivered after the last rollback
        self.fenced: str | None = None  # why the coordinator refuses this incarnation, once it does
        self.last_restore: Restored | None = None
        self.rollbacks: list[Restored] = []
        self._rule: Rule = Rule()
        self._sent = 0  # messages sent (message ids) ...
        self._channel_seq: dict[str, int] = {}  # ... and per receiver; both roll back with the agent
        self._delivered = DeliveredSet()
        self._pending: list[pb.DependencyRecord] = []
        self._resume: pb.CheckpointMeta | None = None
        self._manifest: Manifest | None = None
        self._cut_index: dict[int, int] = {}  # coordinated: epoch -> our checkpoint index for it
        self.handled_orders: set[int] = set()
        self._ids = RequestIds()
        self._batches = 0  # dependency reports sent: each a write of its own (request_ids)
        self._pending_report: tuple[Rpc, int] | None = None  # (the report being sent, records it covers)
        self._refused_epoch = 0
        self._progress = self._progress_at_restore = 0  # messages and checkpoints since the last restore
        self._generation_at_restore = 0
        self._backlog: tuple[list[LoggedDelivery], Mapping[str, Fence]] | None = None  # re-deliveries to do
        self._floor = 0  # no rollback goes below this checkpoint (garbage collection kept it)
        # Recorded calls (recorder.py): where the last restore put the agent, and the
        # call log coordinate a checkpoint names (set once the agent records calls).
        self.run_start = RunStart.of(0, None)
        self.call_coordinate: Callable[[], Any] | None = None

    # ---- small pure helpers --------------------------------------------------------------
    def token(self) -> pb.FencingToken:
        return pb.FencingToken(incarnation=self.incarnation, epoch=self.epoch, secret=self.secret)

    def watch_request(self) -> pb.WatchOrdersRequest:
        return pb.WatchOrdersRequest(group=self.group, agent_id=self.agent_id, token=self.token())

    def keepalive_request(self) -> pb.HeartbeatRequest:
        return pb.HeartbeatRequest(group=self.group, agent_id=self.agent_id, token=self.token())

    def fence(self, reason: str) -> None:
        self.fenced = reason
        log.error("agent %s incarnation %d is fenced off: %s", self.agent_id, self.incarnation, reason)

    def is_stable(self, index: int) -> bool:
        if self.mode != pb.COORDINATED:
            return self.last_index >= index
        return any(i >= index and e <= self.stable_epoch for e, i in self._cut_index.items())

    def in_transit(self, after_checkpoint: int) -> list[LoggedDelivery]:
        """Coordinated mode: logged messages that crossed the cut at `after_checkpoint`
        (sent before the sender's cut, delivered after ours) -- its channel state."""
        return [e for e in self.deliveries.since(after_checkpoint) if e.envelope.epoch < self.cut_epoch]

    # ---- lifecycle ---------------------------------------------------------------------
    def register(self) -> ProtocolOperation[pb.RegisterResponse]:
        """A new incarnation and generation; if this agent was alive, the coordinator
        treats the old one as crashed and computes a recovery line. Restore next."""
        # Drawn here, per registration, and kept in memory beside the incarnation: the
        # coordinator stores only its hash, and a retry of this request repeats it.
        secret = secrets.token_bytes(agent_secret.MIN_SECRET_BYTES)
        resp = yield Rpc("AgentService", "Register", self._ids.stamp("reg", pb.RegisterRequest(
            group=self.group, agent_id=self.agent_id, secret=secret)))
        self.secret = secret
        self.incarnation, self.generation = resp.incarnation, resp.generation
        self._pending_report = None  # its token names the old incarnation: the next flush builds a new one
        self.epoch, self.mode, self.stable_epoch, self.lease_ttl_s = (resp.current_epoch, resp.mode,
                                                                      resp.stable_epoch, resp.lease_ttl_s)
        self._resume = resp.resume_from if resp.HasField("resume_from") else None
        self._rule = rule_for(self.mode, self.agent_id, self.members)
        self.fenced = None
        return resp

    def keepalive(self) -> ProtocolOperation[pb.HeartbeatResponse]:
        """Keeps the lease; learns how far back a rollback can still go, and forgets the
        deliveries before that (the log's only bound, in every mode)."""
        resp = yield Rpc("AgentService", "Heartbeat", self.keepalive_request())
        if resp.rollback_floor > self._floor:
            self._floor = resp.rollback_floor
            yield Blocking(partial(self.deliveries.truncate, resp.rollback_floor))
        return resp

    def close(self, *, deregister: bool = False) -> ProtocolOperation[None]:
        yield from self.flush_dependencies()
        if deregister:
            yield Rpc("AgentService", "Deregister", self._ids.stamp("dereg", pb.DeregisterRequest(
                group=self.group, agent_id=self.agent_id, token=self.token())))

    # ---- restore -----------------------------------------------------------------------
    def restore(self, meta: pb.CheckpointMeta | None = None, reason: str | None = None) -> ProtocolOperation[Restored]:
        """Load `meta` (default: where Register said to resume) and reset the protocol
        state to it. A rejected checkpoint changes nothing and says why."""
        meta = meta if meta is not None else self._resume
        if meta is None or meta.index == 0:
            self._reset_to(0, {}, None)
            return self._remember(Restored(None, 0, reason or "cold start: no checkpoint to resume from",
                                           RestoreKind.COLD_START))
        try:
            data = yield Blocking(partial(load_verified, self.blobs, meta, expected_schema=self.schema_version,
                                          expected_config_hash=self.config_hash), span="raftpoint.blob.get")
            client, state = checkpoint_blob.unpack(data, expected_schema=self.schema_version)
        except CheckpointRejected as exc:
            return self._remember(Restored(None, meta.index, f"rejected: {exc.reason.value}: {exc.detail}",
                                           RestoreKind.REJECTED, exc.reason))
        except checkpoint_blob.BlobFormatError as exc:
            return self._remember(Restored(None, meta.index, f"rejected: {RejectReason.SCHEMA_MISMATCH.value}: {exc}",
                                           RestoreKind.REJECTED, RejectReason.SCHEMA_MISMATCH))
        self._reset_to(meta.index, client, meta)
        kind = RestoreKind.ROLLBACK if reason and reason.startswith("rollback") else RestoreKind.RESUME
        return self._remember(Restored(state, meta.index, reason or f"resume from checkpoint {meta.index}", kind))

    def start_over(self) -> Restored:
        """Continue after Register's resume point without reading its blob, as a cold
        start: for a caller that replaces the state whole and may be unable to read the
        old one (a deleted LangGraph thread). The next checkpoint's index follows it."""
        index = self._resume.index if self._resume is not None else 0
        self._reset_to(index, {}, None)
        return self._remember(Restored(None, index, f"cold start: after checkpoint {index}, which was not read",
                                       RestoreKind.COLD_START))

    def _remember(self, restored: Restored) -> Restored:
        self.last_restore = restored
        self._progress_at_restore = self._progress
        self._generation_at_restore = self.generation
        return restored

    def _reset_to(self, index: int, client: Mapping[str, Any], meta: pb.CheckpointMeta | None) -> None:
        self.last_index = index
        self.run_start = RunStart.of(index, client.get("calls"))
        self._rule = rule_for(self.mode, self.agent_id, self.members)
        self._rule.load_json(client.get("rule"), index)
        self._delivered = DeliveredSet.from_json(client.get("delivered"))
        self._sent = int(client.get("sent", 0))
        self._channel_seq = {str(k): int(v) for k, v in dict(client.get("seq", {})).items()}
        self._pending, self._pending_report = [], None
        self._manifest = None
        if self.mode == pb.COORDINATED:
            self.cut_epoch = int(client.get("cut_epoch", meta.epoch if meta else 0))
            self._cut_index = {e: i for e, i in self._cut_index.items() if i <= index}

    # ---- checkpoints ------------------------------------------------------------------
    def checkpoint(self, state: Any = None, *, forced_index: int | None = None,
                   epoch: int | None = None) -> ProtocolOperation[int]:
        """Write the blob, then commit the metadata; returns the checkpoint index.
        Coordinated groups cut for `epoch` (default: the open epoch)."""
        yield from self.finish_redelivery()
        return (yield from self._checkpoint(state, forced_index=forced_index, epoch=epoch))

    def _checkpoint(self, state: Any = None, *, forced_index: int | None = None,
                    epoch: int | None = None) -> ProtocolOperation[int]:
        value = (yield Callback(self.snapshot)) if state is None else state
        if self.mode == pb.COORDINATED:
            kind, index = pb.COORDINATED_CUT, self.last_index + 1
            cut = self.epoch if epoch is None else epoch
        else:
            kind = pb.FORCED if forced_index is not None else pb.BASIC
            index, cut = max(self.last_index + 1, forced_index or 0), self.epoch
        yield from self.flush_dependencies()
        client = {"rule": self._rule.to_json(), "cut_epoch": cut, "delivered": self._delivered.to_json(),
                  "sent": self._sent, "seq": self._channel_seq}
        if self.call_coordinate is not None:  # which recorded calls follow this checkpoint
            client["calls"] = yield Blocking(self.call_coordinate)
        parts = checkpoint_blob.pack_parts(client, value, schema_version=self.schema_version)
        blob = yield Blocking(partial(self.blobs.put, parts, parent=self._manifest), span="raftpoint.blob.put")
        if self.after_blob_write is not None:
            yield Callback(partial(self.after_blob_write, blob))
        yield Blocking(self.deliveries.sync)  # what the checkpoint depends on is on disk first
        resp = yield Rpc("AgentService", "CommitCheckpoint", self._ids.stamp("cp", pb.CommitCheckpointRequest(
            token=pb.FencingToken(incarnation=self.incarnation, epoch=max(self.epoch, cut), secret=self.secret),
            checkpoint=pb.CheckpointMeta(group=self.group, agent_id=self.agent_id, index=index, epoch=cut,
                                         kind=kind, blob_uri=blob.uri, sha256=blob.sha256, size=blob.size,
                                         schema_version=self.schema_version, config_hash=self.config_hash))))
        if self.after_commit is not None:
            yield Callback(partial(self.after_commit, resp.checkpoint))
        self.last_index, self._manifest = index, blob.manifest
        self._progress += 1
        self._rule.on_checkpoint(index)
        if self.mode == pb.COORDINATED:
            self.cut_epoch, self.epoch = cut, max(self.epoch, cut)
            self._cut_index[cut] = index
        # The delivery log is not trimmed at the stable epoch: a restore can take the group
        # back to an older one (a savepoint's) and must re-deliver what crossed that cut.
        # Only the rollback floor trims it (keepalive); garbage collection raises the floor,
        # never past a savepoint.
        self.stable_epoch = max(self.stable_epoch, resp.stable_epoch)
        return index

    def checkpoint_now(self, epoch: int) -> ProtocolOperation[None]:
        if self.mode == pb.COORDINATED and self.cut_epoch >= epoch:
            return  # already cut for it (forced by a message from that epoch)
        self.epoch = max(self.epoch, epoch)
        try:
            yield from self._checkpoint(epoch=epoch)
        except Rejected as exc:
            if exc.reason_code not in _EPOCH_CUT_NOT_NEEDED:
                raise
            log.info("checkpoint for epoch %d not needed: %s", epoch, exc.reason)

    # ---- messages ---------------------------------------------------------------------
    def wrap(self, payload: bytes, to: str) -> bytes:
        """The envelope to send instead of `payload` (no I/O)."""
        self._sent += 1
        seq = self._channel_seq[to] = self._channel_seq.get(to, 0) + 1
        self._progress += 1
        return Envelope(f"{self.agent_id[:80]}.{self.generation}.{self._sent}", self.agent_id, to, self.generation,
                        seq, self.last_index + 1, self.cut_epoch, self._rule.on_send(to), payload).encode()

    def unwrap(self, data: bytes) -> ProtocolOperation[bytes | None]:
        """The payload, or None for a duplicate or an orphan. May checkpoint first."""
        env = Envelope.decode(data)
        if self._backlog is not None:
            yield from self.finish_redelivery()
        return (yield from self._deliver(env, data))

    def _deliver(self, env: Envelope, raw: bytes | None) -> ProtocolOperation[bytes | None]:
        for round_ in range(MAX_REDELIVERY_ROUNDS):
            if env.key in self._delivered:
                self.duplicates += 1
                return None
            cut = self.cut_needed(env)
            if cut is not None:
                yield from self._cut(*cut)
            record = pb.DependencyRecord(sender=env.sender, send_interval=env.send_interval, receiver=self.agent_id,
                                         receive_interval=self.last_index + 1, message_id=env.message_id,
                                         send_generation=env.generation)
            self._pending.append(record)
            orphan = False
            if len(self._pending) >= self.dependency_batch:
                try:
                    orphan = yield from self.flush_dependencies((env.sender, env.message_id))
                except Rejected as exc:
                    if not owes_rollback(exc) or round_ == MAX_REDELIVERY_ROUNDS - 1:
                        raise
                    # We owe a rollback: carry it out, then deliver in the rolled-back state.
                    yield from self.sync_orders(0.5)
                    continue
            if orphan:
                self.orphans += 1
                log.warning("%s: not delivered, an orphan: %s from %s (its send was undone)",
                            self.agent_id, env.message_id, env.sender)
                return None
            self._rule.on_deliver(env.sender, env.piggyback)
            self._delivered.add(env.key)
            self._progress += 1
            yield Blocking(partial(self.deliveries.append, LoggedDelivery.of(self.last_index, env, raw)), quick=True)
            return env.payload
        raise AssertionError("unreachable")

    def cut_needed(self, env: Envelope) -> tuple[int, int] | None:
        """The checkpoint the rule requires before delivering `env`, as (epoch, forced
        index), or None: a later epoch's message cuts first (Lai-Yang); a CIC rule may
        force one (BCS may jump the index)."""
        if self.mode == pb.COORDINATED:
            if cic.epoch_forces_cut(self.cut_epoch, env.epoch) and env.epoch > self._refused_epoch:
                return env.epoch, 0
            return None
        forced = self._rule.forced_index(env.sender, env.piggyback, self.last_index)
        return None if forced is None else (0, forced)

    def _cut(self, epoch: int, forced_index: int) -> ProtocolOperation[None]:
        if not epoch:
            yield from self._checkpoint(forced_index=forced_index)  # kind FORCED
            self.forced += 1
            return
        try:
            self.epoch = max(self.epoch, epoch)
            yield from self._checkpoint(epoch=epoch)
            self.forced += 1
        except Rejected as exc:  # the epoch was aborted (or never opened here): nothing to cut for
            if owes_rollback(exc):
                raise
            log.info("no cut for epoch %d: %s", epoch, exc.reason)
            self._refused_epoch = epoch

    def flush_dependencies(self, current: tuple[str, str] | None = None) -> ProtocolOperation[bool]:
        """Report pending dependency records. Returns whether the coordinator refused
        `current` (sender, message id), the message being delivered, as an orphan; a
        refused record of a message delivered earlier (dependency_batch > 1) is logged
        and counted in orphans_delivered. A batch keeps its request id until it is
        answered, so a retry after an unknown outcome is the very same write."""
        refused: set[tuple[str, str]] = set()
        while self._pending:
            if self._pending_report is None:
                self._pending_report = (self._report(self._pending), len(self._pending))
            report, n = self._pending_report
            batch = self._pending[:n]
            try:
                yield report
            except Rejected as exc:
                if not is_orphan_refusal(exc):
                    raise
                if n == 1:
                    refused.add((batch[0].sender, batch[0].message_id))
                for rec in batch if n > 1 else ():  # one refused record refuses the report: find which
                    try:
                        yield self._report([rec])
                    except Rejected as single:
                        if not is_orphan_refusal(single):
                            raise
                        refused.add((rec.sender, rec.message_id))
            self._pending, self._pending_report = self._pending[n:], None
        late = refused - {current}
        if late:
            self.orphans_delivered += len(late)
            log.error("%s delivered %d orphan message(s) before reporting them (dependency_batch=%d): %s",
                      self.agent_id, len(late), self.dependency_batch, sorted(late))
        return current in refused

    def _report(self, records: list[pb.DependencyRecord]) -> Rpc:
        """A new report: a write of its own even if an earlier one held the same records
        (one sent again after a rollback must apply again)."""
        self._batches += 1
        return Rpc("AgentService", "ReportDependencies", self._ids.stamp("deps", pb.ReportDependenciesRequest(
            group=self.group, agent_id=self.agent_id, token=self.token(), records=records), nonce=self._batches))

    # ---- orders -----------------------------------------------------------------------
    def pending_orders(self, window: float = 0.5) -> ProtocolOperation[list[pb.Order]]:
        return (yield Watch(self.watch_request(), window))

    def sync_orders(self, window: float = 0.5) -> ProtocolOperation[list[pb.Order]]:
        """Carry out the orders pending now (e.g. right after restore(), before the first
        write, which the coordinator refuses while a rollback order is unacknowledged)."""
        orders = [o for o in (yield from self.pending_orders(window)) if o.order_id not in self.handled_orders]
        for order in orders:
            yield from self.obey(order)
        return orders

    def wants(self, order: pb.Order) -> bool:
        """Whether a watched order is still to be carried out by this process."""
        return order.order_id not in self.handled_orders and not self.fenced

    def obey(self, order: pb.Order) -> ProtocolOperation[Restored | None]:
        """Carry out an order and acknowledge it; a rollback returns what was restored
        (None if the agent was there already), then re-delivers what it forgot. A
        rollback whose checkpoint is rejected is not acknowledged: the agent cannot
        honestly claim to be at the recovery line."""
        if order.order_id in self.handled_orders:  # sync_orders() and the watcher may race
            return None
        restored = None
        kind = order.WhichOneof("kind")
        if kind != "roll_back":
            # A checkpoint must hold every re-delivery. A rollback replaces the backlog
            # instead: it re-delivers from the log, which keeps what is still owed, and
            # finishing the old backlog first would be refused again for the very order
            # being obeyed (a re-delivery refused because a rollback is owed obeys it).
            yield from self.finish_redelivery()
        log.info("order %d for %s: %s", order.order_id, self.agent_id, kind)
        if kind == "roll_back":
            restored = yield from self._roll_back(order)
            if restored is not None and restored.kind is RestoreKind.REJECTED:
                log.error("rollback order %d not obeyed: %s", order.order_id, restored.reason)
                return restored
            self.generation = max(self.generation, order.roll_back.generation)
            if restored is not None and self.on_rollback is not None:
                yield Callback(partial(self.on_rollback, restored.state, restored.reason))
        elif kind == "checkpoint_now":
            yield from self.checkpoint_now(order.checkpoint_now.epoch)
        if self.before_ack is not None:
            yield Callback(partial(self.before_ack, order))
        yield Rpc("AgentService", "AckOrder", self._ids.stamp("ack", pb.AckOrderRequest(
            group=self.group, agent_id=self.agent_id, token=self.token(), order_id=order.order_id)))
        self.handled_orders.add(order.order_id)
        if kind == "roll_back":
            line = {t.agent_id: Fence(t.agent_id, t.generation, t.checkpoint_index) for t in order.roll_back.line}
            yield from self._redeliver(order.roll_back.checkpoint_index, line)
        return restored

    def _roll_back(self, order: pb.Order) -> ProtocolOperation[Restored | None]:
        index = order.roll_back.checkpoint_index
        why = f"rollback order {order.order_id} (recovery {order.roll_back.recovery_id}) to checkpoint {index}"
        if self._already_at(index, order.roll_back.generation):
            return None
        if index == 0:
            self._reset_to(0, {}, None)
            restored = Restored(None, 0, why, RestoreKind.ROLLBACK)
        else:
            metas = (yield Rpc("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
                group=self.group, agent_id=self.agent_id))).checkpoints
            meta = next((m for m in metas if m.index == index), None)
            if meta is None:
                return Restored(None, index, f"rejected: {RejectReason.MISSING_BLOB.value}: checkpoint {index} "
                                f"is not registered", RestoreKind.REJECTED, RejectReason.MISSING_BLOB)
            restored = yield from self.restore(meta, why)
        if restored.kind is not RestoreKind.REJECTED:
            self.rollbacks.append(restored)
        return self._remember(restored)

    def _already_at(self, index: int, generation: int) -> bool:
        """Whether a rollback order to `index` is carried out already, so that it only has
        to be acknowledged (and its deliveries re-delivered):
        - a restarted agent restored its resume point, that same index, and has done
          nothing since;
        - the order is older than the generation the agent restored in (it was issued
          before the agent registered again, or before a later rollback), and that
          restore went back at least as far: what the agent did since is of a newer
          generation, which the order's fence does not undo, and undoing it would make
          the agent forget sends its peers hold (its next send would reuse their keys)."""
        last = self.last_restore
        if last is None or last.kind is RestoreKind.REJECTED:
            return False
        if generation < self._generation_at_restore:
            return last.index <= index
        return last.index == index and self._progress == self._progress_at_restore

    def _redeliver(self, index: int, line: Mapping[str, Fence]) -> ProtocolOperation[None]:
        """Deliver again what the rollback to `index` took out of the agent's state,
        unless the line undid its send as well."""
        entries = yield Blocking(partial(self.deliveries.since, index))
        self.redelivered = []
        if entries and self.on_redeliver is None:
            log.warning("%s: %d message(s) delivered after checkpoint %d are lost: no on_redeliver callback",
                        self.agent_id, len(entries), index)
        self._backlog = (entries, line)
        yield from self.finish_redelivery()

    def finish_redelivery(self) -> ProtocolOperation[None]:
        """Re-deliveries run right after the acknowledgement; if an error interrupts
        them, the next operation finishes them first (those already done are
        duplicates by then). The old records go once all are done: each re-delivery
        logged its message anew."""
        while self._backlog is not None:
            backlog = self._backlog
            entries, line = backlog
            for entry in entries if self.on_redeliver is not None else ():
                if undone_by(line, entry.envelope):
                    continue
                payload = yield from self._deliver(entry.envelope, entry.raw)
                if self._backlog is not backlog:
                    break  # a rollback obeyed meanwhile re-delivered from the log, and dropped what it did
                if payload is not None and self.on_redeliver is not None:
                    self.redelivered.append((entry.envelope.message_id, self.last_index + 1))
                    yield Callback(partial(self.on_redeliver, payload, entry.envelope.sender))
            else:
                yield Blocking(partial(self.deliveries.drop, entries))
                if self._backlog is backlog:
                    self._backlog = None
