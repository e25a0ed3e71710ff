"""The core's State protocol over a byte key-value store, with write overlays.

Reads see, in order: this entry's own writes, the pending batch of earlier
entries not yet committed to the store, then the store. A rejected entry's
overlay is dropped, which is how a failed command leaves the store untouched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

from coordinator.core import codec, data_uris
from coordinator.core.dedupe import DedupeClock
from coordinator.core.history import Dependency
from coordinator.core.model import Agent, Checkpoint, Epoch, Group, Order, Savepoint
from coordinator.storage import keys
from coordinator.storage.protocol import Store

T = TypeVar("T")
# Decoded records (or raw bytes, for dedupe results) by key; None marks a deletion.
Writes = dict[bytes, object | None]

GROUP, AGENT, CHECKPOINT, EPOCH, DEPENDENCY, ORDER, RESULT, SAVEPOINT = "g", "a", "c", "e", "d", "o", "r", "s"
CACHE_LIMIT = 200_000


def _decode(cls: type, raw: bytes) -> object:
    return raw if cls is bytes else codec.decode(cls, raw)


def encode_writes(writes: Writes) -> dict[bytes, bytes | None]:
    return {k: v if v is None or isinstance(v, bytes) else codec.encode(v) for k, v in writes.items()}


@dataclass(frozen=True)
class DependencyBatch:
    """The dependencies one receiver reported in one request, stored as one record:
    a report of a hundred messages costs one key and one encoding, not a hundred.

    Records are (sender, send_interval, receive_interval, message_id), sorted by
    (receive_interval, message_id), each of those at most once."""

    receiver: str
    records: tuple[tuple[str, int, int, str], ...]

    @classmethod
    def of(cls, receiver: str, deps: Iterable[Dependency]) -> "DependencyBatch":
        unique = {(d.receive_interval, d.message_id): (d.sender, d.send_interval, d.receive_interval, d.message_id)
                  for d in deps}
        return cls(receiver, tuple(unique[k] for k in sorted(unique)))

    def dependencies(self) -> list[Dependency]:
        return [Dependency(s, si, self.receiver, ri, m) for s, si, ri, m in self.records]


class DecodeMemo:
    """Decoded records by their encoded bytes, shared by the readers of one store.

    A heartbeat reads its group and agent records; decoding them (the group's member
    list with it) on every call was most of a heartbeat's cost at a thousand agents.
    Equal bytes decode to equal records, and records are immutable, so a decoded
    record can be handed to every reader without any invalidation: a changed record
    has other bytes. Bounded in entries and by record size."""

    def __init__(self, limit: int = 8192, max_record_bytes: int = 64 * 1024) -> None:
        self.limit, self.max_record_bytes = limit, max_record_bytes
        self._decoded: dict[tuple[type, bytes], object] = {}

    def decode(self, cls: type, raw: bytes) -> object:
        if cls is bytes or len(raw) > self.max_record_bytes:
            return _decode(cls, raw)
        key = (cls, raw)
        value = self._decoded.get(key)
        if value is None:
            value = _decode(cls, raw)
            if len(self._decoded) >= self.limit:
                self._decoded = {}
            self._decoded[key] = value
        return value


Layers = Callable[[], tuple[Writes, ...]]


def _no_layers() -> tuple[Writes, ...]:
    return ()


class RecordCache:
    """Decoded records over the store, for the store's single writer.

    All writes reach the store through this cache, so a decoded copy of what the
    store holds never goes stale: hot records (a group, its agents) are decoded
    once, and `pending` holds the applied-but-uncommitted batch as objects, encoded
    once per key at commit. Readers on other threads use their own instance.

    `layers`: batches applied and handed over to be committed but not yet in the
    store (replication.store_committer), oldest first; they are read above the store.
    """

    def __init__(self, store: Store, memo: DecodeMemo | None = None, layers: Layers = _no_layers) -> None:
        self.store = store
        self.pending: Writes = {}
        self._clean: dict[bytes, object | None] = {}
        self._decode = _decode if memo is None else memo.decode
        self._layers = layers

    def get(self, key: bytes, cls: type) -> object | None:
        if key in self.pending:
            return self.pending[key]
        if key in self._clean:
            return self._clean[key]
        for layer in reversed(self._layers()):
            if key in layer:
                return layer[key]
        raw = self.store.get(key)
        value = None if raw is None else self._decode(cls, raw)
        self._remember(key, value)
        return value

    def scan(self, prefix: bytes, cls: type) -> dict[bytes, object | None]:
        clean = self._clean
        layers = self._layers()  # before the store: a layer leaves only once the store holds it
        found: dict[bytes, object | None] = {
            k: clean[k] if k in clean else self._decode(cls, raw) for k, raw in self.store.scan(prefix)}
        for layer in layers:
            found.update((k, v) for k, v in layer.items() if k.startswith(prefix))
        found.update((k, v) for k, v in self.pending.items() if k.startswith(prefix))
        return found

    def scan_from(self, prefix: bytes, cls: type, start: bytes, live: int,
                  top: Writes | None = None) -> list[tuple[bytes, object]]:
        """The first `live` records (deleted ones skipped) under `prefix` whose key is at
        or after `start`, in key order, with `top` (a reader's own writes) over
        everything: a page read without decoding what precedes it.

        The layers, the pending batch and `top` may delete at most as many of the store's keys
        as they hold in the range, so reading that many more from the store is enough:
        when the store's part is cut short, at least `live` records stand at or before
        its last key, and a layer's key past it sorts after them."""
        if live <= 0:
            return []
        layers = self._layers()  # before the store, as in scan
        above: dict[bytes, object | None] = {}
        for layer in (*layers, self.pending, top or {}):
            above.update((k, v) for k, v in layer.items() if k.startswith(prefix) and k >= start)
        stored = self.store.scan(prefix, start=start, limit=live + len(above))
        clean = self._clean
        found: dict[bytes, object | None] = {
            k: clean[k] if k in clean else self._decode(cls, raw) for k, raw in stored}
        found.update(above)
        return [(k, v) for k, v in sorted(found.items()) if v is not None][:live]

    def commit(self, applied_index: int) -> None:
        self.store.commit(encode_writes(self.pending), applied_index)
        self.hand_off()

    def hand_off(self) -> Writes:
        """Take the pending batch, to be committed elsewhere; its values stay known here."""
        writes, self.pending = self.pending, {}
        for key, value in writes.items():
            self._remember(key, value)
        return writes

    def reset(self) -> None:
        """After the store's content was replaced wholesale (snapshot install)."""
        self.pending = {}
        self._clean = {}

    def _remember(self, key: bytes, value: object | None) -> None:
        # The cache counts records, not bytes: a checkpoint holding its state inline (up
        # to 11 KB of text) is read from the store when asked for, so CACHE_LIMIT of them
        # cannot take gigabytes.
        if isinstance(value, Checkpoint) and data_uris.is_inline(value.blob_uri):
            self._clean.pop(key, None)
            return
        if len(self._clean) >= CACHE_LIMIT:
            self._clean = {}
        self._clean[key] = value


class KvState:
    """Implements coordinator.core.state.State; collects this entry's writes in `self.writes`."""

    def __init__(self, source: Store | RecordCache) -> None:
        self.writes: Writes = {}
        self._source = source if isinstance(source, RecordCache) else RecordCache(source)

    def raw(self, key: bytes) -> bytes | None:
        """An encoded value (dedupe results are stored encoded)."""
        return self._get(bytes, key)  # type: ignore[return-value]

    def encoded_writes(self) -> dict[bytes, bytes | None]:
        return encode_writes(self.writes)

    # -- helpers
    def _get(self, cls: type[T], key: bytes) -> T | None:
        if key in self.writes:
            return self.writes[key]  # type: ignore[return-value]
        return self._source.get(key, cls)  # type: ignore[return-value]

    def _scan(self, cls: type[T], prefix: bytes) -> list[T]:
        return [v for _, v in self._scan_items(cls, prefix)]

    def _scan_items(self, cls: type[T], prefix: bytes) -> list[tuple[bytes, T]]:
        """(key, value) under `prefix`, the source overlaid with this batch's writes, by key."""
        found = self._source.scan(prefix, cls)
        found.update((k, v) for k, v in self.writes.items() if k.startswith(prefix))
        return [(k, v) for k, v in sorted(found.items()) if v is not None]  # type: ignore[misc]

    def _put(self, key: bytes, value: object) -> None:
        self.writes[key] = value

    def dedupe_clock(self) -> DedupeClock:
        """The replicated clock: the latest proposal time applied (core.dedupe)."""
        return self._get(DedupeClock, DEDUPE_CLOCK_KEY) or DedupeClock()

    # -- groups, agents
    def group(self, name: str) -> Group | None:
        return self._get(Group, keys.key(GROUP, name))

    def put_group(self, group: Group) -> None:
        self._put(keys.key(GROUP, group.spec.name), group)

    def groups(self) -> list[Group]:
        return self._scan(Group, keys.prefix(GROUP))

    def agent(self, group: str, agent_id: str) -> Agent | None:
        return self._get(Agent, keys.key(AGENT, group, agent_id))

    def agents(self, group: str) -> list[Agent]:
        return self._scan(Agent, keys.prefix(AGENT, group))

    def agents_after(self, group: str, after: str | None, limit: int) -> list[Agent]:
        """At most `limit` of the group's agents whose id is above `after` (all when None),
        by id: a page of a large group costs the page, not the group."""
        prefix = keys.prefix(AGENT, group)
        start = prefix if after is None else keys.key(AGENT, group, after) + b"\x00"  # the least key above it
        return [v for _, v in self._source.scan_from(prefix, Agent, start, limit, top=self.writes)]  # type: ignore[misc]

    def put_agent(self, agent: Agent) -> None:
        self._put(keys.key(AGENT, agent.group, agent.agent_id), agent)

    # -- checkpoints, epochs
    def checkpoint(self, group: str, agent_id: str, index: int) -> Checkpoint | None:
        return self._get(Checkpoint, keys.key(CHECKPOINT, group, agent_id, index))

    def checkpoints(self, group: str, agent_id: str) -> list[Checkpoint]:
        return self._scan(Checkpoint, keys.prefix(CHECKPOINT, group, agent_id))

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._put(keys.key(CHECKPOINT, checkpoint.group, checkpoint.agent_id, checkpoint.index), checkpoint)

    def delete_checkpoint(self, group: str, agent_id: str, index: int) -> None:
        self.writes[keys.key(CHECKPOINT, group, agent_id, index)] = None

    def epoch(self, group: str, epoch: int) -> Epoch | None:
        return self._get(Epoch, keys.key(EPOCH, group, epoch))

    def epochs(self, group: str) -> list[Epoch]:
        return self._scan(Epoch, keys.prefix(EPOCH, group))

    def put_epoch(self, epoch: Epoch) -> None:
        self._put(keys.key(EPOCH, epoch.group, epoch.epoch), epoch)

    def delete_epoch(self, group: str, epoch: int) -> None:
        self.writes[keys.key(EPOCH, group, epoch)] = None

    # -- dependencies (one record per report: see DependencyBatch), orders
    def dependencies(self, group: str) -> list[Dependency]:
        unique: dict[tuple[str, int, str], Dependency] = {}
        for batch in self._scan(DependencyBatch, keys.prefix(DEPENDENCY, group)):
            for dep in batch.dependencies():
                unique[(dep.receiver, dep.receive_interval, dep.message_id)] = dep
        return [unique[k] for k in sorted(unique)]

    def put_dependencies(self, group: str, receiver: str, records: Sequence[Dependency]) -> None:
        """Keyed by the report's first record, so the same report twice is one record;
        a different report that happens to start with the same record is merged in."""
        if not records:
            return
        batch = DependencyBatch.of(receiver, records)
        first = batch.records[0]
        key = keys.key(DEPENDENCY, group, receiver, first[2], first[3])
        existing = self._get(DependencyBatch, key)
        if existing is not None and existing != batch:
            batch = DependencyBatch.of(receiver, [*existing.dependencies(), *batch.dependencies()])
        self._put(key, batch)

    def dependency_count(self, group: str, receiver: str) -> int:
        return sum(len(batch.records) for batch in self._scan(DependencyBatch, keys.prefix(DEPENDENCY, group, receiver)))

    def drop_dependencies(self, group: str, doomed: Callable[[Dependency], bool]) -> None:
        for key, batch in self._scan_items(DependencyBatch, keys.prefix(DEPENDENCY, group)):
            kept = [d for d in batch.dependencies() if not doomed(d)]
            if len(kept) < len(batch.records):
                self.writes[key] = DependencyBatch.of(batch.receiver, kept) if kept else None

    # -- savepoints
    def savepoint(self, group: str, name: str) -> Savepoint | None:
        return self._get(Savepoint, keys.key(SAVEPOINT, group, name))

    def savepoints(self, group: str) -> list[Savepoint]:
        return self._scan(Savepoint, keys.prefix(SAVEPOINT, group))

    def put_savepoint(self, savepoint: Savepoint) -> None:
        self._put(keys.key(SAVEPOINT, savepoint.group, savepoint.name), savepoint)

    def delete_savepoint(self, group: str, name: str) -> None:
        self.writes[keys.key(SAVEPOINT, group, name)] = None

    def orders(self, group: str) -> list[Order]:
        return self._scan(Order, keys.prefix(ORDER, group))

    def order(self, group: str, order_id: int) -> Order | None:
        return self._get(Order, keys.key(ORDER, group, order_id))

    def put_order(self, order: Order) -> None:
        self._put(keys.key(ORDER, order.group, order.order_id), order)

    def delete_order(self, group: str, order_id: int) -> None:
        self.writes[keys.key(ORDER, group, order_id)] = None

    def delete_group(self, name: str) -> None:
        for table, cls in ((AGENT, Agent), (CHECKPOINT, Checkpoint), (EPOCH, Epoch),
                           (DEPENDENCY, DependencyBatch), (ORDER, Order), (SAVEPOINT, Savepoint)):
            for key, _ in self._scan_items(cls, keys.prefix(table, name)):
                self.writes[key] = None
        self.writes[keys.key(GROUP, name)] = None


# What an applied batch changed for an agent's order stream: (group, agent, order id)
# for an order written, (group, agent, None) for the agent's record (its liveness or
# incarnation) written. Deleted orders (acknowledged) wake no one.
AgentChange = tuple[str, str, int | None]


def agent_changes(writes: Writes) -> list[AgentChange]:
    """The agents whose orders or record these writes change: what wakes order streams,
    read off the batch's keys (and an order's own agent id), without reading the store."""
    agents, orders = keys.prefix(AGENT), keys.prefix(ORDER)
    changes: list[AgentChange] = []
    for key, value in writes.items():
        if key.startswith(agents):
            _, (group, agent_id) = keys.parse(key)
            changes.append((str(group), str(agent_id), None))
        elif key.startswith(orders) and isinstance(value, Order):
            changes.append((value.group, value.agent_id, value.order_id))
    return changes


# The dedupe table lives under RESULT, so the domain state digest skips all of it:
# answers by (identity, request id) (two str parts), their forgetting queue by
# sequence number (an int part, which never collides with a str part), the table's
# clock (one str part no request id can have, since "#" is not allowed in request
# ids), and, for one dedupe window after an upgrade, answers an earlier version kept
# by request id alone (one str part; core.dedupe says what becomes of them).
DEDUPE_CLOCK_KEY = keys.key(RESULT, "#clock")


def answer_key(namespace: str, request_id: str) -> bytes:
    """Where an identity's answer to `request_id` is kept (core.dedupe.namespace)."""
    return keys.key(RESULT, namespace, request_id)


def unattributed_key(request_id: str) -> bytes:
    """Where an earlier version kept the answer to `request_id`, whoever sent it."""
    return keys.key(RESULT, request_id)


def remembered_key(sequence: int) -> bytes:
    return keys.key(RESULT, sequence)


def kept_answer(fingerprint: str, answer: bytes) -> bytes:
    """An answer as kept: the fingerprint of the command it answered (64 hex digits), a
    space, then the encoded result."""
    return fingerprint.encode() + b" " + answer


def read_kept_answer(kept: bytes) -> tuple[str, bytes]:
    """(fingerprint, encoded result) of a kept answer."""
    fingerprint, _, answer = kept.partition(b" ")
    return fingerprint.decode(), answer


def remembered_item(issued_ms: int, namespace: str, request_id: str) -> bytes:
    """A forgetting-queue item: when the request was issued, its id and its sender's
    identity, separated by spaces (neither request ids nor bound identities hold one).

    An earlier version's items hold the issue time and the request id only. The id
    comes first so that such a version, reading a new item (a snapshot from an
    upgraded leader), takes "id identity" for a request id: it deletes a key that
    does not exist instead of failing on a key it cannot build."""
    return b"%d %s %s" % (issued_ms, request_id.encode(), namespace.encode())


def read_remembered_item(item: bytes) -> tuple[int, bytes]:
    """(issued ms, the key of the answer) of a forgetting-queue item, old or new."""
    issued, _, rest = item.partition(b" ")
    request_id, new, namespace = rest.decode().partition(" ")
    return int(issued), answer_key(namespace, request_id) if new else unattributed_key(request_id)
