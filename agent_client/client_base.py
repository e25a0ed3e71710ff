"""What AgentClient (agent.py) and AsyncAgentClient (aio.py) share besides the protocol.

The constructor and its options, the stores (blob store, delivery log, side-effect
log) and read-only views of the protocol state. The shells add only how effects are
performed: a connection, a lock, and background threads or tasks.
"""
from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import grpc

from agent_client.agent_stream import TRANSPORTS, keepalive_every
from agent_client.background import FENCED
from agent_client.blobs.location import local_root, open_blob_store
from agent_client.blobs.store import DEFAULT_INLINE_MAX_BYTES
from agent_client.blobstore import BlobStore, PutResult
from agent_client.call_log import CallLog
from agent_client.delivery_log import DeliveryLog, LoggedDelivery
from agent_client.protocol import AgentProtocol
from agent_client.recorder import CallRecorder, recorded_callable
from agent_client.replay import Horizon, check_horizon
from agent_client.side_effects import SideEffectLog
from agent_client.state_codec import config_hash
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS

log = logging.getLogger("agent_client")
DELIVERY_LOG = "deliveries.jsonl"
SIDE_EFFECTS = "side_effects.sqlite"


def _view(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.core, name), doc=doc)


def _keepalive_interval(keepalive_interval: float | None, heartbeat_interval: float | None) -> float | None:
    """The keepalive interval asked for, accepting the deprecated keyword `heartbeat_interval`."""
    if heartbeat_interval is None:
        return keepalive_interval
    if keepalive_interval is not None:
        raise TypeError("give keepalive_interval= only: heartbeat_interval= is its deprecated name")
    # stacklevel: this function, ClientBase.__init__, the client's __init__, its caller.
    warnings.warn("heartbeat_interval= is deprecated: use keepalive_interval=", DeprecationWarning, stacklevel=4)
    return heartbeat_interval


class ClientBase:
    """What the sync and asyncio clients share besides the protocol: read-only views
    of its state, and the side-effect log that follows it (held effects run once their
    checkpoint is stable and are dropped by a rollback)."""

    core: AgentProtocol

    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | str | Path, *,
                 snapshot: Callable[[], Any], on_rollback: Callable[[Any, str], Any] | None = None,
                 on_redeliver: Callable[[bytes, str], Any] | None = None,
                 members: Sequence[str] = (), schema_version: int = 1, config: Mapping[str, object] | None = None,
                 aead_key: bytes | None = None, state_dir: str | Path | None = None, dependency_batch: int = 1,
                 fsync_deliveries: bool = False, background: bool = True, keepalive_interval: float | None = None,
                 deadline: float = 30.0, after_blob_write: Callable[[PutResult], Any] | None = None,
                 after_commit: Callable[[pb.CheckpointMeta], Any] | None = None,
                 before_ack: Callable[[pb.Order], Any] | None = None, token: str | None = None,
                 transport: str = "session", tls: ClientTLS | None = None, replay: Horizon = "none",
                 heartbeat_interval: float | None = None,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES) -> None:
        """`snapshot()` returns the agent's state (bytes or JSON); `on_rollback(state, reason)`
        replaces the agent's live state after a rollback order; `on_redeliver(payload,
        sender)` then applies each message the rollback took out of the state and its
        sender will not send again (the asyncio client accepts coroutine functions).
        `members` is the fixed member list HMNR and FDAS need. `state_dir` holds the
        delivery and side-effect logs (default: <blob dir>/agents/<group>/<agent>; with
        an s3:// location or another blob store and no state_dir the delivery log is in memory, and an agent
        that crashed cannot re-deliver). `fsync_deliveries` makes each delivery survive a
        power loss, not only a crash of the process. `keepalive_interval` defaults to
        keepalive_every(transport, the group's lease). `after_blob_write` and `after_commit` are test hooks
        around the metadata commit; `before_ack(order)` runs once an order is carried out
        (a rollback restored and handed to on_rollback) and before it is acknowledged.
        `token`: the bearer token that identifies this agent to the coordinator (when it
        requires one).
        `transport`: "session" (default) carries the agent's calls, keepalives and pushed
        orders on one stream (agent_stream.py); "unary" makes one call per operation,
        keepalives as Heartbeat calls and a WatchOrders stream. `tls`: the connection's TLS
        settings (agent_client.connection.Connection; None: from the environment).
        `replay`: how many recorded calls (recorded()) a run replays after each restore:
        "none" (default), "effects", "all" or a number (docs/replay.md).
        `heartbeat_interval`: the deprecated name of `keepalive_interval`.
        `inline_max_bytes`: a checkpoint of at most this many bytes travels inside its
        commit, with no blob written (0: never; for a blob store given as a location)."""
        keepalive_interval = _keepalive_interval(keepalive_interval, heartbeat_interval)
        self.replay = check_horizon(replay)
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        self.transport = transport
        self.endpoints = list(endpoints)
        self.token = token
        self.tls = tls
        self.deadline, self.background, self.keepalive_interval = deadline, background, keepalive_interval
        if isinstance(blob_store, (str, Path)):
            self.blobs: BlobStore = open_blob_store(blob_store, key=aead_key, inline_max_bytes=inline_max_bytes)
            root = local_root(blob_store)
            if state_dir is None and root is not None:
                state_dir = root / "agents" / group / agent_id
        else:
            self.blobs = blob_store
        self.state_dir = None if state_dir is None else Path(state_dir)
        deliveries = DeliveryLog(None if self.state_dir is None else self.state_dir / DELIVERY_LOG,
                                 fsync=fsync_deliveries)
        self.core = AgentProtocol(group, agent_id, blobs=self.blobs, deliveries=deliveries, snapshot=snapshot,
                                  on_rollback=on_rollback, on_redeliver=on_redeliver, members=members,
                                  schema_version=schema_version, config_hash=config_hash(config or {}),
                                  dependency_batch=dependency_batch, after_blob_write=after_blob_write,
                                  after_commit=after_commit, before_ack=before_ack)
        self._effects: SideEffectLog | None = None
        self.calls: CallRecorder | None = None  # once the agent records calls: how far the run replays, where it is

    def keepalive(self) -> Any:
        """Renew this incarnation's lease now (the Heartbeat RPC); the background thread
        or task already does so every keepalive_every() seconds."""
        raise NotImplementedError

    def heartbeat(self) -> Any:
        """Deprecated: the old name of keepalive()."""
        warnings.warn("heartbeat() is deprecated: use keepalive()", DeprecationWarning, stacklevel=2)
        return self.keepalive()

    def _fence(self, reason: str) -> None:
        """A newer incarnation exists (or we were declared failed): stop the background work."""
        raise NotImplementedError

    def _watch_ended(self, code: grpc.StatusCode, reason: str) -> None:
        """The session's watch ended for good: fenced off, or a refusal to log."""
        if code in FENCED:
            self._fence(reason)
        else:
            log.warning("order watch ended: %s %s", code.name, reason)

    def keepalive_every(self) -> float:
        """Seconds between this agent's keepalives: as configured, else agent_stream's default."""
        return self.keepalive_interval or keepalive_every(self.transport, self.core.lease_ttl_s or 3.0)
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

    def _journal(self, what: str) -> Path:
        """The side-effect journal's file, which the recorded calls share."""
        if self.state_dir is None:
            raise ValueError(f"{what} need state_dir (the blob store is not a local directory)")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return self.state_dir / SIDE_EFFECTS

    def _effect_log(self) -> SideEffectLog:
        if self._effects is None:
            self._effects = SideEffectLog(self._journal("side effects"))
        return self._effects

    def _side_effect(self, key: str, fn: Callable[[], Any], hold_until_stable: bool) -> Any:
        """side_effect(), blocking: the effect's position is recorded before it starts."""
        effects = self._effect_log()
        if self.calls is not None:
            self.calls.note_effect(key)
        if not hold_until_stable:
            return effects.run(key, fn)
        return effects.hold_until_stable(key, fn, self._held_until())

    def recorded(self, name: str, fn: Callable[..., Any], *, request: Callable[..., Any] | None = None
                 ) -> Callable[..., Any]:
        """`fn` (a model or tool client: plain or coroutine function) with its calls
        recorded, so that a run after a restore can replay them (the `replay` option).
        Arguments and responses must be JSON; `request(*args, **kwargs)` may say instead
        what identifies a call, as a JSON value. A replayed call that asks something
        else than the recorded one raises ReplayDiverged. Calls with external effects
        go through side_effect(), whose key makes them happen once whatever the replay."""
        if self.calls is None:
            self.calls = CallRecorder(CallLog(self._journal("recorded calls")), self.replay,
                                      lambda: self.core.run_start)
            self.core.call_coordinate = self.calls.coordinate
        return recorded_callable(self.calls, name, fn, request)

    def _held_until(self) -> Callable[[], bool]:
        covering = self.core.last_index + 1
        return lambda: self.core.is_stable(covering)

    def _mark(self) -> tuple[int, int]:
        return len(self.core.rollbacks), self.core.last_index

    def _close_stores(self) -> None:
        """The side-effect journal and the delivery log, once the client is done."""
        if self._effects is not None:
            self._effects.close()
        if self.calls is not None:
            self.calls.close()
        self.core.deliveries.close()

    def _settle_effects(self, mark: tuple[int, int]) -> None:
        """After an operation: a rollback drops held effects; a new checkpoint may release some."""
        if self._effects is None:
            return
        if len(self.core.rollbacks) != mark[0]:
            self._effects.discard_held()
        if self.core.last_index != mark[1]:
            self._effects.release()
