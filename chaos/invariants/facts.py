"""A history indexed for the invariants: every send of a request id together, by group.

Time windows are what linearizability allows: a request took effect at one point
between its *first* invocation (any send may be the one applied) and the end of
its first `ok`, so an answer describes the state at some point in that window.
A request with no `ok` and no definite refusal may take effect at any point
after its first invocation, but not long after its last send (`latest_effect`): a
Raft entry not committed within an election or two of the leader that took it is
truncated (a new leader elected with it in its log commits it at once; one elected
without it drops it).
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

from chaos.history import FAIL, NEMESIS, OK, Call, Op, calls

INF = float("inf")
TRANSIENT = frozenset({"RESOURCE_EXHAUSTED"})  # refused before proposing; the same request may pass later
UNKNOWN_APPLY_GRACE_S = 10.0  # how long after its last send an unanswered request may still take effect


def error_code(op: Op | None) -> str:
    return "" if op is None or not op.error else op.error.split(":", 1)[0]


@dataclass
class Req:
    """Every send of one request id (the first send and its retries), in invocation order."""

    rid: str
    calls: list[Call] = field(default_factory=list)

    @property
    def first(self) -> Call:
        return self.calls[0]

    @property
    def f(self) -> str:
        return self.first.invoke.f

    @property
    def value(self) -> dict[str, Any]:
        return self.first.invoke.value

    @property
    def group(self) -> str:
        return self.value.get("group", "")

    @property
    def start(self) -> float:
        return self.first.start

    @cached_property
    def oks(self) -> list[Call]:
        return sorted((c for c in self.calls if c.type == OK), key=lambda c: c.end)

    @cached_property
    def refusals(self) -> list[Call]:
        return [c for c in self.calls if c.type == FAIL and error_code(c.completion) not in TRANSIENT]

    @property
    def ok(self) -> bool:
        return bool(self.oks)

    @property
    def applied_by(self) -> float:
        """When it had certainly taken effect (inf: not known to have)."""
        return self.oks[0].end if self.oks else INF

    @property
    def latest_effect(self) -> float:
        """The latest moment it may have taken effect (inf: a send never completed)."""
        if self.oks:
            return self.applied_by
        return max(c.end for c in self.calls) + UNKNOWN_APPLY_GRACE_S

    @property
    def may_apply(self) -> bool:
        return bool(self.oks) or not self.refusals

    @property
    def answer(self) -> dict[str, Any] | None:
        return self.oks[0].completion.value if self.oks else None

    @property
    def ok_op(self) -> Op | None:
        return self.oks[0].completion if self.oks else None


@dataclass(frozen=True)
class Observation:
    """What one answer shows about its group's counters, and the window it held in."""

    req: Req
    current: int | None = None
    stable: int | None = None
    recovery_id: int | None = None
    state: str | None = None
    epochs: tuple[dict[str, Any], ...] = ()

    @property
    def start(self) -> float:
        return self.req.start

    @property
    def end(self) -> float:
        return self.req.applied_by


def _observation(req: Req) -> Observation | None:
    a = req.answer
    if a is None:
        return None
    match req.f:
        case "register":
            return Observation(req, a["current_epoch"], a["stable_epoch"], a["recovery_id"])
        case "get_group":
            return Observation(req, a["current_epoch"], a["stable_epoch"], a["recovery_id"], a["state"],
                               tuple(a["epochs"]))
        case "start_epoch":
            return Observation(req, a["epoch"]["epoch"], epochs=(a["epoch"],))
        case "commit":
            return Observation(req, stable=a["stable_epoch"])
        case "create_group":
            return Observation(req, a["current_epoch"], a["stable_epoch"])
    return None


class Facts:
    def __init__(self, ops: Iterable[Op]) -> None:
        self.ops = list(ops)
        self.reqs: dict[str, Req] = {}
        for call in calls(self.ops):
            value = call.invoke.value
            if isinstance(value, dict) and "rid" in value:
                self.reqs.setdefault(value["rid"], Req(value["rid"])).calls.append(call)
        self._by_group: dict[str, dict[str, list[Req]]] = defaultdict(lambda: defaultdict(list))
        for req in sorted(self.reqs.values(), key=lambda r: r.start):
            self._by_group[req.group][req.f].append(req)

    @property
    def groups(self) -> list[str]:
        return sorted(g for g in self._by_group if g)

    def of(self, group: str, *fs: str) -> list[Req]:
        """The group's requests of these kinds, by first invocation."""
        found = [r for f in fs for r in self._by_group.get(group, {}).get(f, [])]
        return sorted(found, key=lambda r: r.start) if len(fs) > 1 else found

    def all(self, *fs: str) -> list[Req]:
        return sorted((r for r in self.reqs.values() if r.f in fs), key=lambda r: r.start)

    def spec(self, group: str) -> dict[str, Any]:
        created = self.of(group, "create_group")
        return created[0].value if created else {}

    def automatic_epochs(self, group: str) -> bool:
        """Whether the leader may start epochs itself (then epoch counts prove nothing)."""
        spec = self.spec(group)
        return spec.get("checkpoint_interval_s", 0) > 0 or (spec.get("checkpoint_cost_s", 0) > 0 and
                                                              spec.get("mtbf_s", 0) > 0) or not spec

    @cached_property
    def _observations(self) -> dict[str, list[Observation]]:
        out: dict[str, list[Observation]] = defaultdict(list)
        for req in self.reqs.values():
            obs = _observation(req)
            if obs is not None:
                out[req.group].append(obs)
        return out

    def observations(self, group: str) -> list[Observation]:
        return self._observations.get(group, [])

    def last_ok(self, group: str, f: str) -> Req | None:
        done = [r for r in self.of(group, f) if r.ok]
        return max(done, key=lambda r: r.applied_by) if done else None

    def final_listing(self, group: str) -> tuple[Op, list[dict[str, Any]]] | None:
        """The last answered ListCheckpoints of the group and its entries; "the group does
        not exist" lists nothing (the whole group was lost)."""
        answered = [op for r in self.of(group, "list_checkpoints") for c in r.calls if (op := c.completion)
                    and (op.type == OK or (op.type == FAIL and error_code(op) == "NOT_FOUND"))]
        if not answered:
            return None
        last = max(answered, key=lambda op: op.time)
        return last, last.value["checkpoints"] if last.type == OK else []

    def notes(self, f: str) -> list[Op]:
        return [op for op in self.ops if op.f == f and op.type == "info" and op.process != NEMESIS]

    @property
    def nemesis(self) -> list[Op]:
        return [op for op in self.ops if op.process == NEMESIS]

    def nemesis_phase(self, phase: str) -> list[Op]:
        """The nemesis ops that mark where a fault came into force (FAULT) or ended (HEAL)."""
        return [op for op in self.nemesis if isinstance(op.value, dict) and op.value.get("phase") == phase]


class EarliestAtLeast:
    """Per scope: the earliest time some value >= k had been seen, and the op that showed it."""

    def __init__(self) -> None:
        self._seen: dict[object, list[tuple[int, float, Op | None]]] = defaultdict(list)
        self._tables: dict[object, tuple[list[int], list[tuple[float, Op | None]]]] = {}

    def saw(self, scope: object, value: int, t: float, op: Op | None) -> None:
        self._seen[scope].append((value, t, op))
        self._tables.pop(scope, None)

    def first_at_least(self, scope: object, k: int) -> tuple[float, Op | None]:
        if scope not in self._tables:  # values descending, each with the earliest time at or above it
            keys, best, running = [], [], (INF, None)
            for value, t, op in sorted(self._seen.get(scope, ()), key=lambda s: -s[0]):
                if t < running[0]:
                    running = (t, op)
                keys.append(-value)
                best.append(running)
            self._tables[scope] = (keys, best)
        keys, best = self._tables[scope]
        i = bisect.bisect_right(keys, -k)
        return best[i - 1] if i else (INF, None)
