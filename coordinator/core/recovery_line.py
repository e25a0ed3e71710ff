"""Recovery lines on checkpoint histories (pure, linear-time worklists).

A cut gives each agent a checkpoint index, or None for its current volatile state
(it contains all its events). A message is an orphan in a cut when its receive is
in the cut and its send is not; a consistent cut has none.

Each propagation below touches every message at most once: messages are indexed
by sender (for rollback) or receiver (for roll-forward), sorted by interval, and a
per-agent pointer only moves one way, because cuts only move one way.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter
from typing import Collection, Iterable, Mapping, Sequence

from coordinator.core.history import Dependency, History

Cut = dict[str, int | None]
INF = float("inf")


def _contains(cut_index: int | None, interval: int) -> bool:
    return cut_index is None or interval <= cut_index


def _last_before(indexes: Sequence[int], interval: int) -> int:
    """The newest checkpoint not containing an event of this interval."""
    return indexes[bisect.bisect_left(indexes, interval) - 1]


def _first_containing(indexes: Sequence[int], interval: int) -> int | None:
    i = bisect.bisect_left(indexes, interval)
    return indexes[i] if i < len(indexes) else None


@dataclass(frozen=True)
class RecoveryLine:
    cut: Cut  # None: the agent keeps running and does not roll back
    rolled_back: frozenset[str]


def _rollback(history: History, cut: Cut, usable: Mapping[str, Sequence[int]]) -> Cut:
    """Move receivers back until no orphan remains: the maximum consistent cut below `cut`."""
    by_sender: dict[str, list[Dependency]] = defaultdict(list)
    for m in history.messages:
        by_sender[m.sender].append(m)
    newest_first = attrgetter("send_interval")
    for msgs in by_sender.values():
        msgs.sort(key=newest_first, reverse=True)
    pointer = dict.fromkeys(by_sender, 0)
    work = [a for a, c in cut.items() if c is not None]  # only agents with a bound ever enter
    while work:
        sender = work.pop()
        msgs = by_sender.get(sender, [])
        if not msgs:
            continue
        bound = cut[sender]
        i, n = pointer[sender], len(msgs)
        while i < n:
            m = msgs[i]
            if m.send_interval <= bound:  # type: ignore[operator]
                break
            i += 1
            held = cut[m.receiver]
            if held is None or m.receive_interval <= held:
                cut[m.receiver] = _last_before(usable[m.receiver], m.receive_interval)
                work.append(m.receiver)
        pointer[sender] = i
    return cut


def _usable(history: History, usable: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    if usable is None:
        return {a: list(c) for a, c in history.checkpoints.items()}
    return {a: sorted({0, *usable.get(a, ())}) for a in history.checkpoints}


def recovery_line(history: History, failed: Collection[str], *,
                  usable: Mapping[str, Sequence[int]] | None = None) -> RecoveryLine:
    """The maximum consistent recovery line after `failed` lose their volatile state.

    Failed agents start at their newest usable checkpoint, the others at their
    current state; only checkpoints in `usable` (default: all) may be rolled back to.
    """
    ok = _usable(history, usable)
    unknown = set(failed) - set(history.checkpoints)
    if unknown:
        raise ValueError(f"unknown failed agents: {sorted(unknown)}")
    cut: Cut = {a: (ok[a][-1] if a in failed else None) for a in history.checkpoints}
    cut = _rollback(history, cut, ok)
    return RecoveryLine(cut, frozenset(a for a, c in cut.items() if c is not None))


def max_consistent_containing(history: History, fixed: Mapping[str, int]) -> Cut | None:
    """The newest consistent global checkpoint containing the `fixed` checkpoints, or None."""
    ok = _usable(history, None)
    cut: Cut = {a: ok[a][-1] for a in history.checkpoints}
    cut.update(fixed)
    cut = _rollback(history, cut, ok)
    return cut if all(cut[a] == c for a, c in fixed.items()) else None


def min_consistent_containing(history: History, fixed: Mapping[str, int]) -> Cut | None:
    """The oldest consistent global checkpoint containing the `fixed` checkpoints, or None.

    Roll-forward: a message received in the cut but not sent in it moves its
    sender forward to the first checkpoint containing the send.
    """
    ok = _usable(history, None)
    cut: dict[str, int] = {a: 0 for a in history.checkpoints}
    cut.update(fixed)
    by_receiver: dict[str, list[Dependency]] = defaultdict(list)
    for m in history.messages:
        by_receiver[m.receiver].append(m)
    for msgs in by_receiver.values():
        msgs.sort(key=lambda m: m.receive_interval)
    pointer = dict.fromkeys(by_receiver, 0)
    work = list(cut)
    while work:
        receiver = work.pop()
        msgs = by_receiver.get(receiver, [])
        i = pointer.get(receiver, 0)
        while i < len(msgs) and msgs[i].receive_interval <= cut[receiver]:
            m = msgs[i]
            i += 1
            if m.send_interval > cut[m.sender]:
                target = _first_containing(ok[m.sender], m.send_interval)
                if target is None or m.sender in fixed:
                    return None
                cut[m.sender] = target
                work.append(m.sender)
        if receiver in pointer:
            pointer[receiver] = i
    return dict(cut)


def orphans(history: History, cut: Mapping[str, int | None]) -> list[Dependency]:
    return [m for m in history.messages
            if _contains(cut[m.receiver], m.receive_interval) and not _contains(cut[m.sender], m.send_interval)]


def in_transit(history: History, cut: Mapping[str, int | None]) -> list[Dependency]:
    """Sent inside the cut, received outside it: to be replayed from the channel log."""
    return [m for m in history.messages
            if _contains(cut[m.sender], m.send_interval) and not _contains(cut[m.receiver], m.receive_interval)]


def useless_checkpoints(history: History) -> set[tuple[str, int]]:
    """Checkpoints on a Z-cycle (Netzer & Xu), i.e. in no consistent global checkpoint.

    Rollback-dependency graph: node (p, c) means "p rolls back past c"; it implies
    (p, next c), and for a message sent in an interval covered first by (p, c) it
    implies the receiver rolls back past its first checkpoint containing the receive.
    (p, c) is useless iff (p, next c) leads back to it: they share a strongly
    connected component.
    """
    nodes: list[tuple[str, float]] = []
    ids: dict[tuple[str, float], int] = {}
    for agent, cps in history.checkpoints.items():
        for c in (*cps, INF):
            ids[(agent, c)] = len(nodes)
            nodes.append((agent, c))
    edges: list[list[int]] = [[] for _ in nodes]
    for agent, cps in history.checkpoints.items():
        chain = (*cps, INF)
        for a, b in zip(chain, chain[1:]):
            edges[ids[(agent, a)]].append(ids[(agent, b)])
    for m in history.messages:
        src = _first_containing(history.checkpoints[m.sender], m.send_interval)
        dst = _first_containing(history.checkpoints[m.receiver], m.receive_interval)
        edges[ids[(m.sender, INF if src is None else src)]].append(ids[(m.receiver, INF if dst is None else dst)])
    comp = _scc(edges)
    out = set()
    for agent, cps in history.checkpoints.items():
        chain = (*cps, INF)
        for a, b in zip(chain, chain[1:]):
            if comp[ids[(agent, a)]] == comp[ids[(agent, b)]]:
                out.add((agent, int(a)))
    return out


def _scc(edges: list[list[int]]) -> list[int]:
    """Iterative Tarjan: component id per node."""
    n = len(edges)
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    on_stack = [False] * n
    stack: list[int] = []
    counter = components = 0
    for root in range(n):
        if index[root] != -1:
            continue
        call = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while call:
            v, i = call[-1]
            if i < len(edges[v]):
                call[-1] = (v, i + 1)
                w = edges[v][i]
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    call.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            call.pop()
            if call:
                low[call[-1][0]] = min(low[call[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp[w] = components
                    if w == v:
                        break
                components += 1
    return comp


def gc_watermark(history: History, usable: Mapping[str, Sequence[int]] | None = None,
                 retention: int = 0) -> dict[str, int]:
    """Per agent, the oldest checkpoint index still needed.

    Any future recovery line is at or above the line for "every agent fails now"
    (consistent cuts form a lattice and every failure set starts at or above that
    point; later messages only touch later intervals). So checkpoints below it
    can never be restored; `retention` keeps that many older ones anyway.
    """
    ok = _usable(history, usable)
    line = recovery_line(history, history.checkpoints.keys(), usable=ok).cut
    out = {}
    for agent, cps in ok.items():
        pos = cps.index(line[agent])  # type: ignore[arg-type]
        out[agent] = cps[max(0, pos - retention)]
    return out


def lost_intervals(history: History, line: RecoveryLine, last_interval: Mapping[str, int]) -> dict[str, int]:
    """Intervals of work undone per rolled-back agent (by index distance)."""
    return {a: max(0, last_interval[a] - (line.cut[a] or 0)) for a in line.rolled_back}


def rollback_plan(history: History, failed: Iterable[str], usable: Mapping[str, Sequence[int]] | None = None) -> Cut:
    """What rolls back where if `failed` fail now ("what if")."""
    return {a: c for a, c in recovery_line(history, set(failed), usable=usable).cut.items() if c is not None}
