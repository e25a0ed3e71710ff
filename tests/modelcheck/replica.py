"""The replicated state as a model-checker value: the store's records, applied to by
the real applier (dedupe included) and the real state machine.

A state is the store's content as a sorted tuple of (key, bytes): the codec's
encoding is canonical, so equal states hash alike. The dedupe table is kept only for
the request ids a client may still retry (`retriable`): with one constant proposal
time nothing is ever forgotten by time, and an answer no one can ask for again
changes no later step, so dropping it merges states that behave alike.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Sequence

from coordinator.core import dedupe
from coordinator.core.commands import Command, Entry, Proposal, Result, decode_result
from coordinator.core.model import Agent, Checkpoint, Epoch, Group, Order
from coordinator.core.history import Dependency
from coordinator.replication.applier import apply_proposal
from coordinator.storage import keys
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import RESULT, DecodeMemo, KvState, RecordCache, answer_key
from tests.modelcheck.memo import Memo

Records = tuple[tuple[bytes, bytes], ...]
NOW = 100.0  # every proposal's time: leases and epoch timeouts are choices of the model, not clocks
_RESULTS = keys.prefix(RESULT)
# Decoded records by their bytes, shared by every state: most records recur unchanged.
_MEMO = DecodeMemo(limit=1 << 20)


def _store(records: Records) -> MemoryStore:
    store = MemoryStore()
    store.commit(dict(records), 1)
    return store


CACHE_LIMIT = 1 << 18
_APPLIED: Memo[tuple[Records, str, str, frozenset[str]], tuple[Records, Result]] = Memo(CACHE_LIMIT)
_VIEWS: Memo[Records, "View"] = Memo(CACHE_LIMIT)


# The command each answer the dedupe table keeps answers, by its request id and the
# command's fingerprint (which is all the table keeps of it): filled as commands are
# applied, so it names every kept answer's command before any state holding the answer
# is seen (symmetry.py renames the command; the fingerprint, a hash of agent ids, cannot
# be renamed). One fingerprint may stand for one command under several request ids.
_ANSWERED: dict[tuple[str, str], Command] = {}


def forget() -> None:
    """Drop remembered applications and views: a run must see the core as it is now
    (a planted bug replaces part of it)."""
    _APPLIED.clear()
    _VIEWS.clear()
    _ANSWERED.clear()


def answered(request_id: str, fingerprint: str) -> Command | None:
    """The command a kept answer answers (None: never applied here)."""
    return _ANSWERED.get((request_id, fingerprint))


def learned() -> dict[tuple[str, str], Command]:
    return dict(_ANSWERED)


def relearn(table: dict[tuple[str, str], Command]) -> None:
    _ANSWERED.update(table)


def apply(records: Records, request_id: str, command: Command, retriable: Collection[str]) -> tuple[Records, Result]:
    """The records after one log entry holding `command`, and its answer. Remembered:
    worlds that differ only outside the store apply the same entries to it."""
    key = (records, request_id, repr(command), frozenset(retriable))
    found = _APPLIED.get(key)
    if found is None:
        found = _APPLIED.remember(key, _apply(records, request_id, command, key[3]))
    return found


def _apply(records: Records, request_id: str, command: Command, retriable: frozenset[str]) -> tuple[Records, Result]:
    if request_id in retriable:  # its answer is kept (below)
        _ANSWERED[(request_id, dedupe.fingerprint(command))] = command
    store = _store(records)
    cache = RecordCache(store, _MEMO)
    proposal = Proposal(NOW, 0.0, (Entry(request_id, NOW, command),))
    answer = apply_proposal(cache, proposal)
    cache.commit(2)
    kept = {answer_key("", rid) for rid in retriable}
    after = tuple((k, v) for k, v in store.scan(b"") if not k.startswith(_RESULTS) or k in kept)
    return after, decode_result(answer)  # type: ignore[arg-type]


def domain_changed(before: Records, after: Records) -> bool:
    """Whether a record outside the dedupe table differs: a retry answered from the
    table, or a refused command, changes none."""
    return _domain(before) != _domain(after)


def _domain(records: Records) -> Records:
    return tuple(kv for kv in records if not kv[0].startswith(_RESULTS))


def view_of(records: Records, group: str) -> "View":
    """The (remembered) View of `records`."""
    found = _VIEWS.get(records)
    if found is None:
        found = _VIEWS.remember(records, View(records, group))
    return found


class View:
    """Read access to a state (the core's own KvState over it); reads only, each
    remembered (a View is shared by every world with these records, and read again
    by every move and invariant)."""

    def __init__(self, records: Records, group: str) -> None:
        self.state = KvState(RecordCache(_store(records), _MEMO))
        self.name = group
        self._read: dict[tuple[str, object], Any] = {}

    def _once(self, what: str, arg: object, read: Callable[[], Any]) -> Any:
        key = (what, arg)
        if key not in self._read:
            self._read[key] = read()
        return self._read[key]

    def group(self) -> Group:
        found = self._once("group", None, lambda: self.state.group(self.name))
        assert found is not None
        return found

    def agent(self, agent_id: str) -> Agent | None:
        return self._once("agent", agent_id, lambda: self.state.agent(self.name, agent_id))

    def agents(self) -> Sequence[Agent]:
        return self._once("agents", None, lambda: tuple(self.state.agents(self.name)))

    def checkpoints(self, agent_id: str) -> Sequence[Checkpoint]:
        return self._once("checkpoints", agent_id, lambda: tuple(self.state.checkpoints(self.name, agent_id)))

    def epoch(self, number: int) -> Epoch | None:
        return self._once("epoch", number, lambda: self.state.epoch(self.name, number))

    def orders(self) -> Sequence[Order]:
        return self._once("orders", None, lambda: tuple(self.state.orders(self.name)))

    def dependencies(self) -> Sequence[Dependency]:
        return self._once("dependencies", None, lambda: tuple(self.state.dependencies(self.name)))
