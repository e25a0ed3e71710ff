"""AgentClient: what an agent links to checkpoint, message and recover consistently.

Messages go through wrap()/unwrap(): unwrap delivers each message id once, applies
the group's rule (a higher epoch or the CIC protocol may force a checkpoint *before*
delivery, through the agent's snapshot callback), and records the dependency the
coordinator needs for recovery lines, reported in batches. checkpoint() writes the
blob first and commits metadata second, so a crash in between leaves only garbage.
restore() says why it returns what it returns.
"""
from __future__ import annotations

import hashlib
import json
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from agent_client.blobstore import BlobError, LocalBlobStore
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.envelope import Envelope
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core import cic

DEPENDENCY_BATCH = 100


def config_hash(config: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Restored:
    state: bytes | None
    index: int
    reason: str  # "cold start", "resume from checkpoint N", "rollback order ...", "rejected: ..."


class AgentClient:
    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_dir: str | Path, *,
                 snapshot: Callable[[], bytes], members: Sequence[str] = (), schema_version: int = 1,
                 config: Mapping[str, object] | None = None, aead_key: bytes | None = None) -> None:
        self.group, self.agent_id = group, agent_id
        self.conn = Connection(endpoints)
        self.blobs = LocalBlobStore(blob_dir, key=aead_key)
        self.snapshot = snapshot
        self.members = list(members)
        self.schema_version = schema_version
        self.config_hash = config_hash(config or {})
        self.incarnation = 0
        self.epoch = 0
        self.mode = pb.GROUP_MODE_UNSPECIFIED
        self.last_index = 0
        self.forced = 0
        self._seq = 0
        self._delivered: set[str] = set()
        self._pending: list[pb.DependencyRecord] = []
        self._resume: pb.CheckpointMeta | None = None
        self._lock = threading.RLock()
        self._bcs = cic.BcsState()
        self._vector: cic.FdasState | cic.HmnrState | None = None

    # ---- lifecycle --------------------------------------------------------------------
    def register(self) -> None:
        resp = self.conn.call("AgentService", "Register", pb.RegisterRequest(
            request_id=f"reg-{uuid.uuid4().hex}", group=self.group, agent_id=self.agent_id))
        self.incarnation, self.epoch, self.mode = resp.incarnation, resp.current_epoch, resp.mode
        self._resume = resp.resume_from if resp.HasField("resume_from") else None
        if self.mode in (pb.CIC_FDAS, pb.CIC_HMNR):
            if self.agent_id not in self.members:
                raise ValueError(f"{pb.GroupMode.Name(self.mode)} needs the fixed member list, including {self.agent_id!r}")
            me, n = self.members.index(self.agent_id), len(self.members)
            self._vector = cic.FdasState.create(me, n) if self.mode == pb.CIC_FDAS else cic.HmnrState.create(me, n)

    def token(self) -> pb.FencingToken:
        return pb.FencingToken(incarnation=self.incarnation, epoch=self.epoch)

    def close(self) -> None:
        self.conn.close()

    # ---- restore ----------------------------------------------------------------------
    def restore(self, meta: pb.CheckpointMeta | None = None, reason: str | None = None) -> Restored:
        meta = meta if meta is not None else self._resume
        if meta is None or meta.index == 0:
            self.last_index = 0
            return Restored(None, 0, reason or "cold start: no checkpoint to resume from")
        why = reason or f"resume from checkpoint {meta.index}"
        if meta.schema_version != self.schema_version:
            return Restored(None, meta.index, f"rejected: schema version {meta.schema_version} != {self.schema_version}")
        if meta.config_hash != self.config_hash:
            return Restored(None, meta.index, "rejected: configuration hash differs from the checkpoint's")
        try:
            data = self.blobs.get(meta.blob_uri)
        except BlobError as exc:
            return Restored(None, meta.index, f"rejected: {exc}")
        if hashlib.sha256(data).hexdigest() != meta.sha256:
            return Restored(None, meta.index, "rejected: blob digest differs from the registered SHA-256")
        with self._lock:
            self.last_index = meta.index
            self._bcs.lc = meta.index
            self._pending = []
        return Restored(data, meta.index, why)

    # ---- checkpoints ------------------------------------------------------------------
    def checkpoint(self, state: bytes | None = None, *, forced_index: int | None = None) -> int:
        with self._lock:
            data = self.snapshot() if state is None else state
            if self.mode == pb.COORDINATED:
                kind, index = pb.COORDINATED_CUT, self.last_index + 1
            else:
                kind = pb.FORCED if forced_index is not None else pb.BASIC
                index = max(self.last_index + 1, forced_index or 0)
            self.flush_dependencies()
            blob = self.blobs.put(data)
            self.conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id=f"cp-{self.agent_id}-{self.incarnation}-{index}", token=self.token(),
                checkpoint=pb.CheckpointMeta(group=self.group, agent_id=self.agent_id, index=index, epoch=self.epoch,
                                             kind=kind, blob_uri=blob.uri, sha256=blob.sha256, size=blob.size,
                                             schema_version=self.schema_version, config_hash=self.config_hash)))
            self.last_index = self._bcs.lc = index
            if isinstance(self._vector, cic.FdasState):
                cic.fdas_on_checkpoint(self._vector)
            elif isinstance(self._vector, cic.HmnrState):
                cic.hmnr_on_checkpoint(self._vector)
            return index

    # ---- messages ---------------------------------------------------------------------
    def wrap(self, payload: bytes, to: str) -> bytes:
        with self._lock:
            self._seq += 1
            if isinstance(self._vector, cic.FdasState):
                piggyback = cic.fdas_on_send(self._vector)
            elif isinstance(self._vector, cic.HmnrState):
                piggyback = cic.hmnr_on_send(self._vector, self.members.index(to))
            else:
                piggyback = cic.bcs_on_send(self._bcs)
            return Envelope(f"{self.agent_id}.{self.incarnation}.{self._seq}", self.agent_id, self.last_index + 1,
                            self.epoch, piggyback, payload).encode()

    def unwrap(self, data: bytes) -> bytes | None:
        """The payload, or None for a duplicate. May checkpoint first."""
        env = Envelope.decode(data)
        with self._lock:
            if env.message_id in self._delivered:
                return None
            if self.mode == pb.COORDINATED and cic.epoch_forces_cut(self.epoch, env.epoch):
                self.epoch = env.epoch  # the sender already cut for this epoch: cut before delivering
                self.forced += 1
                self.checkpoint()
            elif self._must_checkpoint(env):
                self.forced += 1
                self.checkpoint(forced_index=cic.bcs_forced_index(self._bcs, env.piggyback)
                                if self.mode == pb.CIC_BCS else self.last_index + 1)
            if isinstance(self._vector, cic.FdasState):
                cic.fdas_on_deliver(self._vector, env.piggyback)
            elif isinstance(self._vector, cic.HmnrState):
                cic.hmnr_on_deliver(self._vector, self.members.index(env.sender), env.piggyback)
            self._delivered.add(env.message_id)
            self._pending.append(pb.DependencyRecord(sender=env.sender, send_interval=env.send_interval,
                                                     receiver=self.agent_id, receive_interval=self.last_index + 1,
                                                     message_id=env.message_id))
            if len(self._pending) >= DEPENDENCY_BATCH:
                self.flush_dependencies()
            return env.payload

    def _must_checkpoint(self, env: Envelope) -> bool:
        if self.mode == pb.CIC_BCS:
            return cic.bcs_forced_index(self._bcs, env.piggyback) is not None
        if isinstance(self._vector, cic.FdasState):
            return cic.fdas_must_checkpoint(self._vector, env.piggyback)
        if isinstance(self._vector, cic.HmnrState):
            return cic.hmnr_must_checkpoint(self._vector, self.members.index(env.sender), env.piggyback)
        return False

    def flush_dependencies(self) -> None:
        with self._lock:
            if not self._pending:
                return
            records, self._pending = self._pending, []
            self.conn.call("AgentService", "ReportDependencies", pb.ReportDependenciesRequest(
                request_id=f"deps-{self.agent_id}-{self.incarnation}-{records[0].message_id}", group=self.group,
                agent_id=self.agent_id, token=self.token(), records=records))

    # ---- orders -----------------------------------------------------------------------
    def pending_orders(self, window: float = 0.5) -> list[pb.Order]:
        return self.conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group=self.group, agent_id=self.agent_id, token=self.token()), window=window)

    def obey(self, order: pb.Order) -> Restored | None:
        """Carry out an order and acknowledge it; a rollback returns what to resume from."""
        restored = None
        if order.WhichOneof("kind") == "roll_back":
            index = order.roll_back.checkpoint_index
            metas = self.conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(
                group=self.group, agent_id=self.agent_id)).checkpoints
            meta = next((m for m in metas if m.index == index), None)
            restored = self.restore(meta, f"rollback order {order.order_id} to checkpoint {index}")
        elif order.WhichOneof("kind") == "checkpoint_now":
            self.epoch = max(self.epoch, order.checkpoint_now.epoch)
            self.checkpoint()
        self.conn.call("AgentService", "AckOrder", pb.AckOrderRequest(
            request_id=f"ack-{self.agent_id}-{self.incarnation}-{order.order_id}", group=self.group,
            agent_id=self.agent_id, token=self.token(), order_id=order.order_id))
        return restored

    def heartbeat(self) -> None:
        self.conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(
            group=self.group, agent_id=self.agent_id, token=self.token()))


__all__ = ["AgentClient", "CoordinatorUnavailable", "Rejected", "Restored", "config_hash"]
