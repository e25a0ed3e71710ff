"""The core's State protocol over a byte key-value store, with write overlays.

Reads see, in order: this entry's own writes, the pending batch of earlier
entries not yet committed to the store, then the store. A rejected entry's
overlay is dropped, which is how a failed command leaves the store untouched.
"""
from __future__ import annotations

from typing import Iterable, TypeVar

from coordinator.core import codec
from coordinator.core.history import Dependency
from coordinator.core.model import Agent, Checkpoint, Epoch, Group, Order
from coordinator.storage import keys
from coordinator.storage.protocol import Store

T = TypeVar("T")
Writes = dict[bytes, bytes | None]

GROUP, AGENT, CHECKPOINT, EPOCH, DEPENDENCY, ORDER, RESULT = "g", "a", "c", "e", "d", "o", "r"


class LayeredReader:
    """Point and prefix reads through a stack of overlays down to the store."""

    def __init__(self, store: Store, overlays: Iterable[Writes]) -> None:
        self._store = store
        self._overlays = list(overlays)  # highest priority first

    def get(self, key: bytes) -> bytes | None:
        for overlay in self._overlays:
            if key in overlay:
                return overlay[key]
        return self._store.get(key)

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        merged: dict[bytes, bytes | None] = dict(self._store.scan(prefix))
        for overlay in reversed(self._overlays):
            for key, value in overlay.items():
                if key.startswith(prefix):
                    merged[key] = value
        return [(k, v) for k, v in sorted(merged.items()) if v is not None]


class KvState:
    """Implements coordinator.core.state.State; collects writes in `self.writes`."""

    def __init__(self, store: Store, *below: Writes) -> None:
        self.writes: Writes = {}
        self._reader = LayeredReader(store, (self.writes, *below))

    def raw(self, key: bytes) -> bytes | None:
        """An encoded value through the overlays (used for dedupe results)."""
        return self._reader.get(key)

    # -- helpers
    def _get(self, cls: type[T], key: bytes) -> T | None:
        raw = self._reader.get(key)
        return None if raw is None else codec.decode(cls, raw)

    def _scan(self, cls: type[T], prefix: bytes) -> list[T]:
        return [codec.decode(cls, raw) for _, raw in self._reader.scan(prefix)]

    def _put(self, key: bytes, value: object) -> None:
        self.writes[key] = codec.encode(value)

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

    # -- dependencies, orders
    @staticmethod
    def _dependency_key(group: str, dep: Dependency) -> bytes:
        return keys.key(DEPENDENCY, group, dep.receiver, dep.receive_interval, dep.message_id)

    def dependencies(self, group: str) -> list[Dependency]:
        return self._scan(Dependency, keys.prefix(DEPENDENCY, group))

    def put_dependency(self, group: str, dependency: Dependency) -> None:
        self._put(self._dependency_key(group, dependency), dependency)

    def delete_dependency(self, group: str, dependency: Dependency) -> None:
        self.writes[self._dependency_key(group, dependency)] = None

    def orders(self, group: str) -> list[Order]:
        return self._scan(Order, keys.prefix(ORDER, group))

    def put_order(self, order: Order) -> None:
        self._put(keys.key(ORDER, order.group, order.order_id), order)

    def delete_order(self, group: str, order_id: int) -> None:
        self.writes[keys.key(ORDER, group, order_id)] = None


def result_key(request_id: str) -> bytes:
    return keys.key(RESULT, request_id)

