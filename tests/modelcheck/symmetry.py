"""Symmetry reduction: one world explored per orbit of agent renamings.

The workload is symmetric (every agent gets the same budgets, sends to every other,
runs the same rule), so renaming agents maps a reachable world to a world that
behaves alike: its transitions are the renamed transitions, and every invariant
gives the same verdict (none names an agent). The search therefore keys a world by
`key(world)`: the smallest, over every permutation of agent ids, of the hash of an
encoding of the renamed world (every world of an orbit has the same set of
encodings, so the same key), and explores one world per key.

Why no violation is missed. Write R(w) for the renaming of w by permutation R. The
encoding below, E(R, w), is injective up to what nothing observes: E(R1, w1) ==
E(R2, w2) only if R1(w1) and R2(w2) agree on everything a transition or an invariant
reads. So two worlds with one key (barring a 64-bit hash collision, as for plain
world hashes) are renamings of each other up to unobserved detail, and (Ip and Dill's theorem, "Better verification through symmetry", 1996)
exploring one world per key reaches, for every reachable world, one of its
renamings; since transitions commute with renaming and invariants are invariant
under it, a violation reachable in the full search is reachable, renamed, in the
reduced one, at the same depth (so counterexamples stay shortest). The key need not
pick one representative per orbit: a missed merge costs states, never soundness.

Why an abstraction of the core's state and not the renamed state itself. The core's
records cannot be renamed byte for byte: the dedupe table keeps a SHA-256 of each
answered command (agent ids inside), blob URIs end in a hash of the blob's content
(message ids inside), and order ids are handed out in agent-id order. E therefore
reads the records through the core's own key and JSON codecs and renders:
- every string that names an agent (agent ids, message ids `a1`, request ids, blob
  URIs, `missing` entries) renamed; a string that looks like an agent id in a shape
  this module does not know raises instead of passing unrenamed;
- a list the core keeps in agent-id order (a group's and an epoch's members, the
  agents that committed an epoch, a recovery's line: agent ids, or objects of
  distinct agents) put back in agent-id order after renaming, the order the core
  gives the renamed list; every other list (an agent's own fences) keeps its order;
- a blob URI as its renamed agent, index and the renamed content of the blob it
  names (the hash is a function of that content; world.BLOBS records each blob as
  the model writes it, so before any world can name it);
- a kept answer's command fingerprint as the renamed command it is the fingerprint
  of (replica.answered: a table filled as commands are applied, so it holds the
  command before any world holds its answer, whichever worlds the search met first
  and in whichever process: the fingerprint is a function of the command);
- no `reason` field: the prose of a refusal or of an aborted epoch, which neither
  the core nor the model reads (the model reads result types and reason codes);
- the vector CIC rules' state and piggybacks (FDAS, HMNR index agents by position)
  permuted, `me` renamed;
- order ids, and the acknowledgement request ids that name them, renumbered 1, 2,
  ... as the core would have numbered the renamed orders (it numbers one decision's
  orders in agent-id order, so a renamed world's orders carry each other's ids),
  then ids still named whose order is gone: the core and the model compare order
  ids for equality only, and every new id stays below the group's next_order_id
  (the core's next), so renumbering them is a symmetry too.
tests/modelcheck/test_symmetry.py checks the claim where it can be checked: on two
agents the reduced search reaches exactly the orbits the full search does, and finds
what the full search finds for every planted bug.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
import struct
from collections.abc import Callable
from enum import Enum
from typing import Any

from coordinator.core import codec
from coordinator.core.model import Mode
from coordinator.storage import keys
from coordinator.storage.state import ORDER, RESULT, read_kept_answer
from tests.modelcheck import replica
from tests.modelcheck.memo import Memo
from tests.modelcheck.replica import Records
from tests.modelcheck.world import BLOBS, GROUP, Bounds, Msg, Pending, Proc, Saved, World, with_changes

Perm = tuple[int, ...]  # agent i is renamed to agent perm[i]
CACHE_LIMIT = 1 << 18


class _Null:
    """None as a rendering holds it. Python 3.11 hashes None by its address, which
    differs from one process to the next, and a search's keys must hash alike in
    every process that resumes it (saved_search.py); this hashes as a string no
    rendering holds, and equals only itself."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash("\0null")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Null)

    def __reduce__(self) -> str:
        return "NULL"

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


class Renaming:
    """One permutation of one bounds' agents, applied to every shape of value that
    names an agent."""

    def __init__(self, bounds: Bounds, perm: Perm) -> None:
        names = bounds.names
        assert GROUP not in names, "the group's name must not be an agent's"
        self.perm = perm
        self.n = len(names)
        self.mode = bounds.mode
        self.names = dict(zip(names, (names[j] for j in perm)))
        agent = f"[{''.join(names)}]"
        self._mid = re.compile(f"({agent})(\\d+)")
        self._own = re.compile(f"({agent})-(.*?)(?:-deps-({agent})(\\d+))?")
        self._leader = re.compile(f"leader-fail-({agent})-(\\d+)")
        self._uri = re.compile(f"file:///blobs/({agent})/(\\d+)\\.([0-9a-f]+)")
        self._blob = re.compile(f"({agent})/(\\d+)")
        self._token = re.compile(f"(?<![A-Za-z0-9]){agent}(?![A-Za-z])")
        self._rules: dict[str, Any] = {}
        self._blobs: dict[Saved, tuple[Any, ...]] = {}
        self._values: Memo[Any, Any] = Memo(CACHE_LIMIT)

    def name(self, agent: str) -> str:
        return self.names[agent]

    def index(self, i: int) -> int:
        return self.perm[i]

    def vector(self, values: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
        out: list[Any] = [None] * self.n
        for i, v in enumerate(values):
            out[self.perm[i]] = v
        return tuple(out)

    def text(self, s: str) -> Any:
        """A string, renamed if it names an agent in a shape the model produces."""
        if s in self.names:
            return self.names[s]
        if m := self._mid.fullmatch(s):
            return self.names[m[1]] + m[2]
        if m := self._uri.fullmatch(s):
            return ("blob", self.names[m[1]], int(m[2]), self.saved(BLOBS[s]))
        if m := self._blob.fullmatch(s):
            return f"{self.names[m[1]]}/{m[2]}"
        if m := self._leader.fullmatch(s):
            return f"leader-fail-{self.names[m[1]]}-{m[2]}"
        if m := self._own.fullmatch(s):
            tail = f"-deps-{self.names[m[3]]}{m[4]}" if m[3] else ""
            return f"{self.names[m[1]]}-{m[2]}{tail}"
        if self._token.search(s):
            raise ValueError(f"{s!r} may name an agent in a shape the symmetry reduction cannot rename")
        return s

    def plain(self, value: Any, ids: dict[int, int]) -> Any:
        """A decoded JSON value renamed (order ids by `ids`), prose fields left out,
        and a list the core keeps in agent-id order put back in that order."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return tuple(sorted((k, ids.get(v, v) if k in _ORDER_IDS else self.plain(v, ids))
                                for k, v in value.items() if k not in _UNREAD))
        if isinstance(value, list):
            items = [self.plain(v, ids) for v in value]
            if value and all(isinstance(v, str) and v in self.names for v in value):
                return tuple(sorted(items))  # members, an epoch's committed agents
            owners = [v.get("agent_id") for v in value if isinstance(v, dict)]
            if len(owners) == len(value) > 1 and len(set(owners)) == len(owners) and set(owners) <= set(self.names):
                return tuple(item for _, item in sorted(zip(map(self.name, owners), items)))  # a recovery's line
            return tuple(items)
        return NULL if value is None else value

    def value(self, value: Any) -> Any:
        """obj(value), remembered: messages and commands recur across worlds."""
        found = self._values.get(value)
        if found is None:
            found = self._values.remember(value, self.obj(value))
        return found

    def obj(self, value: Any) -> Any:
        """A model value (dataclass, tuple, enum, str, bytes, number) renamed."""
        if isinstance(value, Saved):
            return self.saved(value)
        if isinstance(value, Msg):
            return (self.text(value.mid), self.name(value.sender), self.name(value.receiver), value.generation,
                    value.interval, value.epoch, self.piggyback(value.piggyback))
        if dataclasses.is_dataclass(value):
            return (type(value).__name__,) + tuple(self.obj(getattr(value, f.name))
                                                   for f in dataclasses.fields(value))
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (tuple, list, frozenset, set)):
            return tuple(self.obj(v) for v in value)
        return NULL if value is None else value

    def saved(self, s: Saved) -> tuple[Any, ...]:
        """A blob by its content (the part of its URI that is not a hash of that content)."""
        found = self._blobs.get(s)
        if found is None:
            found = self._blobs[s] = self._saved(s)
        return found

    def _saved(self, s: Saved) -> tuple[Any, ...]:
        held = tuple((self.text(h.mid), self.name(h.sender), h.received) for h in s.held)
        return (s.index, held, self.rule(s.rule), s.cut_epoch)

    def rule(self, doc: str) -> Any:
        """A rule's state (JSON text): per-agent vectors permuted, `me` renamed."""
        found = self._rules.get(doc)
        if found is None:
            found = self._rules[doc] = self._rule(doc)
        return found

    def _rule(self, doc: str) -> Any:
        state = json.loads(doc) if doc else None
        if not isinstance(state, dict):
            return NULL if state is None else state
        return tuple(sorted((k, self.index(v) if k == "me" else
                             self.vector(v) if isinstance(v, list) and len(v) == self.n else
                             NULL if v is None else v)
                            for k, v in state.items()))

    def piggyback(self, data: bytes) -> Any:
        """FDAS piggybacks a vector, HMNR three (clock, checkpoint, taken); BCS a scalar."""
        n = self.n
        if self.mode is Mode.CIC_FDAS:
            return self.vector(struct.unpack(f">{n}Q", data))
        if self.mode is Mode.CIC_HMNR:
            values = struct.unpack(f">{2 * n}Q{n}?", data)
            return tuple(self.vector(values[k * n:(k + 1) * n]) for k in range(3))
        return data


def permutations(bounds: Bounds) -> list[Perm]:
    return list(itertools.permutations(range(bounds.agents)))


_UNREAD = frozenset({"reason"})  # prose of a refusal or an aborted epoch: nothing reads it
_ORDER_IDS = frozenset({"order_id", "rollback_order"})
_RENAMINGS: dict[tuple[Bounds, Perm], Renaming] = {}
_DECODED: Memo[tuple[bytes, bytes], _Record] = Memo(CACHE_LIMIT)
# A record renamed, by renaming and the new ids of the order ids it names (all it reads
# of a world's renumbering).
_RENDERED_RECORDS: Memo[tuple[Renaming, bytes, bytes, tuple[int, ...]], tuple[str, Any]] = Memo(CACHE_LIMIT)


def _renaming(bounds: Bounds, perm: Perm) -> Renaming:
    found = _RENAMINGS.get((bounds, perm))
    if found is None:
        found = _RENAMINGS[(bounds, perm)] = Renaming(bounds, perm)
    return found


@dataclasses.dataclass(frozen=True)
class _Record:
    """One record decoded, renaming aside: what every renaming of it reads."""

    table: str
    parts: tuple[Any, ...]
    fingerprint: str | None  # a kept answer's command fingerprint
    kind: str | None  # a kept answer's result type
    value: Any  # the decoded JSON
    orders: tuple[int, ...]  # the order ids it names: in its value, or acknowledged in its key
    renumbered: tuple[int, ...]  # every id a renumbering of orders can change in it


def _decoded(raw_key: bytes, raw_value: bytes) -> _Record:
    """A record decoded once (remembered: most records of a world are its parent's)."""
    found = _DECODED.get((raw_key, raw_value))
    if found is not None:
        return found
    table, parts = keys.parse(raw_key)
    fingerprint = kind = None
    if table == RESULT:
        fingerprint, kept = read_kept_answer(raw_value)
        head, _, body = kept.partition(b"\n")
        kind, value = head.decode(), json.loads(body)
    else:
        value = json.loads(raw_value)
    named = _referenced(value, set())
    named.update(int(m[2]) for p in parts if isinstance(p, str) and (m := _ACK.fullmatch(p)) is not None)
    keyed = {p for p in parts if isinstance(p, int)} if table == ORDER else set()
    record = _Record(table, parts, fingerprint, kind, value, tuple(sorted(named)), tuple(sorted(named | keyed)))
    return _DECODED.remember((raw_key, raw_value), record)


def _records(r: Renaming, records: Records, pending_orders: frozenset[int]) -> tuple[int, dict[int, int]]:
    """The hash of the records renamed (in renamed-key order), and the renumbering of
    the order ids they and the writes still to be retried (`pending_orders`) name
    (Encoder remembers it: records recur across worlds)."""
    decoded = [_decoded(raw_key, raw_value) for raw_key, raw_value in records]
    referenced = set(pending_orders).union(*(d.orders for d in decoded))
    ids = _order_ids(r, [d.value["d"] for d in decoded if d.table == ORDER], referenced)
    out = []
    for (raw_key, raw_value), d in zip(records, decoded):
        renumbered = tuple(ids.get(o, o) for o in d.renumbered)
        rendered = _RENDERED_RECORDS.get((r, raw_key, raw_value, renumbered))
        if rendered is None:
            key = (d.table,) + tuple(r.text(_acking(p, ids)) if isinstance(p, str) else
                                     ids.get(p, p) if d.table == ORDER else p for p in d.parts)
            rendered = _RENDERED_RECORDS.remember((r, raw_key, raw_value, renumbered),
                                                  (repr(key), r.plain(d.value, ids)))
        head = () if d.fingerprint is None else (_answered(r, d.parts[-1], d.fingerprint, ids), d.kind)
        out.append((rendered[0], head + (rendered[1],)))
    return hash(tuple(sorted(out))), ids


def _answered(r: Renaming, request_id: str, fingerprint: str, ids: dict[int, int]) -> Any:
    """A kept answer's command fingerprint as the renamed command it is the fingerprint
    of (in the codec's plain form, as a record's value: order ids renumbered too)."""
    command = replica.answered(request_id, fingerprint)
    if command is None:
        raise AssertionError(f"the answer kept for {request_id} is to a command never applied")
    return type(command).__name__, r.plain(codec.to_plain(command), ids)


def _order_ids(r: Renaming, orders: list[dict[str, Any]], referenced: set[int]) -> dict[int, int]:
    """Order ids renumbered 1, 2, ... as the core would have numbered the renamed
    orders: by recovery, kind, epoch and then agent id (the core numbers the orders
    of one decision in agent-id order), then the ids still referenced whose order is
    gone. Ids are compared for equality only and every new id stays below
    next_order_id (the core's next), so any such renumbering is a symmetry."""
    ranked = sorted(orders, key=lambda o: (o["recovery_id"], o["kind"], o["epoch"], r.name(o["agent_id"]),
                                           o["order_id"]))
    live = [o["order_id"] for o in ranked]
    gone = sorted(referenced - set(live) - {0})
    return {old: new for new, old in enumerate(live + gone, start=1)}


def _referenced(value: Any, found: set[int]) -> set[int]:
    """Every order id a decoded record names."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in _ORDER_IDS and isinstance(v, int):
                found.add(v)
            else:
                _referenced(v, found)
    elif isinstance(value, list):
        for v in value:
            _referenced(v, found)
    return found


class Encoder:
    """E(perm, world) for every permutation at once, as one hash per permutation.

    A world is rendered part by part (the records, each process, the network, ...),
    each part under every renaming, and each distinct part is rendered and hashed
    once (remembered: parts recur across worlds far more often than whole worlds); a
    world's encoding under a permutation is then the hash of its parts' hashes under
    that permutation, processes placed at their renamed positions. Hashing the parts
    first changes nothing of the argument above: equal renamed parts give equal
    hashes, and distinct ones collide no more often than 64-bit hashes do."""

    def __init__(self, bounds: Bounds) -> None:
        _check_rendered()
        self.bounds = bounds
        self.renamings = [_renaming(bounds, perm) for perm in permutations(bounds)]
        self._parts: Memo[tuple[str, Any], tuple[Any, ...]] = Memo(CACHE_LIMIT)

    def _part(self, kind: str, value: Any, render: Callable[[Renaming, Any], Any]) -> tuple[Any, ...]:
        """`render(r, value)` for every renaming r, remembered."""
        found = self._parts.get((kind, value))
        if found is None:
            found = self._parts.remember((kind, value), tuple(render(r, value) for r in self.renamings))
        return found

    def hashes(self, world: World) -> list[int]:
        """The hash of E(perm, world) for each permutation, in permutations() order,
        but for the world's budgets (which no renaming changes: key() adds them)."""
        pending_orders = frozenset(w.order_id for _, w in _writes(world, self.bounds))
        records = self._part("records", (world.records, pending_orders), lambda r, v: _records(r, *v))
        procs = [self._part("proc", p if p.pending is None else with_changes(p, pending=None),
                            lambda r, v: hash(_proc(r, v))) for p in world.procs]
        value, text = Renaming.value, Renaming.text
        rest = (
            self._part("net", world.net, _hash_sorted(value)),
            self._part("in_flight", world.in_flight, _hash_sorted(value)),
            self._part("suspected", world.suspected, _hash_sorted(_named)),
            self._part("sends", world.sends, _hash_sorted(value)),
            self._part("undone", world.undone, _hash_sorted(text)),
            self._part("missing", world.missing, _hash_sorted(text)),
        )
        out = []
        for n, r in enumerate(self.renamings):
            records_hash, ids = records[n]
            placed: list[Any] = [None] * r.n
            for i, p in enumerate(world.procs):
                placed[r.index(i)] = procs[i][n] if p.pending is None else (procs[i][n], _pending(r, p.pending, ids))
            late = tuple((r.name(a), _pending(r, w, ids)) for a, w in world.late)
            out.append(hash((records_hash, tuple(placed), tuple(part[n] for part in rest), world.restores, late)))
        return out


def _hash_sorted(render: Callable[[Renaming, Any], Any]) -> Callable[[Renaming, Any], int]:
    """The hash of a collection's items rendered and sorted: the model keeps them in
    an order that renaming does not keep."""
    return lambda r, items: hash(tuple(sorted(render(r, item) for item in items)))


def _named(r: Renaming, pair: tuple[str, int]) -> tuple[str, int]:
    """An (agent, incarnation) pair renamed."""
    return r.name(pair[0]), pair[1]


def _writes(world: World, bounds: Bounds) -> list[tuple[str, Pending]]:
    """Every write the model may still send again, with its agent."""
    own = [(bounds.names[i], p.pending) for i, p in enumerate(world.procs) if p.pending is not None]
    return own + list(world.late)


def _pending(r: Renaming, w: Pending | None, ids: dict[int, int]) -> Any:
    if w is None:
        return NULL
    renumbered = with_changes(w, request_id=_acking(w.request_id, ids), order_id=ids.get(w.order_id, w.order_id))
    return r.value(renumbered)


_ACK = re.compile(r"(.*-ack-)(\d+)")


def _acking(request_id: str, ids: dict[int, int]) -> str:
    """An acknowledgement's request id names its order: renumbered with the order."""
    m = _ACK.fullmatch(request_id)
    return request_id if m is None else f"{m[1]}{ids.get(int(m[2]), int(m[2]))}"


# Every field of a world and of a process, as hashes() and _proc() render them: a field
# left out would make worlds that differ in it one world.
_RENDERED = {
    World: {"records", "procs", "net", "in_flight", "suspected", "sends", "undone", "missing", "restores", "late",
            "failures", "leader_changes", "losses", "epochs"},  # the budgets: key() adds them
    Proc: {"up", "incarnation", "generation", "last", "cut_epoch", "rule", "held", "saved", "lives", "starting",
           "log", "backlog", "owed", "pending"},
    Msg: {"mid", "sender", "receiver", "generation", "interval", "epoch", "piggyback"},  # Renaming.obj
    Saved: {"index", "held", "rule", "cut_epoch", "uri"},  # Renaming.saved: the URI by the rest, its content
}


def _check_rendered() -> None:
    for kind, rendered in _RENDERED.items():
        fields = {f.name for f in dataclasses.fields(kind)}
        if fields != rendered:
            raise AssertionError(f"symmetry.py does not render {kind.__name__}'s {sorted(fields - rendered)} "
                                 f"(or renders gone {sorted(rendered - fields)})")


def _proc(r: Renaming, p: Proc) -> tuple[Any, ...]:
    """A process renamed, but for its pending write (whose order id the records renumber)."""
    held = tuple((r.text(h.mid), r.name(h.sender), h.received) for h in p.held)
    return (p.up, p.incarnation, p.generation, p.last, p.cut_epoch, r.rule(p.rule), held,
            tuple(sorted((r.saved(s) for s in p.saved), key=repr)), p.lives, p.starting,
            tuple(r.value(e) for e in p.log), tuple(r.value(e) for e in p.backlog), tuple(r.value(e) for e in p.owed))


def shape(bounds: Bounds) -> Callable[[World], int]:
    """A world's key but for its budgets: the smallest hash of its encodings over
    every renaming (the same set of encodings for every world of an orbit; 64 bits,
    so a collision is as unlikely as one of plain world hashes)."""
    encoder = Encoder(bounds)
    return lambda world: min(encoder.hashes(world))


def key(bounds: Bounds) -> Callable[[World], int]:
    """The search's key of a world: its shape and its budgets (both the same for
    every world of an orbit)."""
    shape_of = shape(bounds)
    return lambda world: hash((shape_of(world), world.budgets))


def forget() -> None:
    for table in (BLOBS, _RENAMINGS, _DECODED, _RENDERED_RECORDS):
        table.clear()


def learned() -> dict[str, dict[Any, Any]]:
    """What the hashes met so far stand for (a saved search keeps it, and a worker sends
    it back: a world may name a blob, or hold the answer to a command, that only an
    earlier world showed)."""
    return {"blobs": dict(BLOBS), "answered": replica.learned()}


def relearn(tables: dict[str, dict[Any, Any]]) -> None:
    BLOBS.update(tables["blobs"])
    replica.relearn(tables["answered"])
