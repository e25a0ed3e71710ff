"""Definitions, by enumeration: every cut of a small history, checked message by message.

Independent of coordinator.core.recovery_line on purpose: it shares only the
History data and the interval convention (checkpoint c contains intervals <= c;
None is the volatile final state, which contains everything).
"""
from __future__ import annotations

import itertools
from typing import Iterator, Mapping

from coordinator.core.history import History

Cut = dict[str, "int | None"]


def _in(c: int | None, interval: int) -> bool:
    return c is None or interval <= c


def consistent(history: History, cut: Mapping[str, int | None]) -> bool:
    return not any(_in(cut[m.receiver], m.receive_interval) and not _in(cut[m.sender], m.send_interval)
                   for m in history.messages)


def all_cuts(history: History, choices: Mapping[str, list[int | None]]) -> Iterator[Cut]:
    agents = sorted(choices)
    for combo in itertools.product(*(choices[a] for a in agents)):
        yield dict(zip(agents, combo))


def _key(c: int | None) -> float:
    return float("inf") if c is None else c


def maximum(cuts: list[Cut]) -> Cut | None:
    """The componentwise maximum, provided it is itself one of the cuts."""
    if not cuts:
        return None
    top = {a: max((c[a] for c in cuts), key=_key) for a in cuts[0]}
    return top if top in cuts else None


def minimum(cuts: list[Cut]) -> Cut | None:
    if not cuts:
        return None
    low = {a: min((c[a] for c in cuts), key=_key) for a in cuts[0]}
    return low if low in cuts else None


def recovery_line(history: History, failed: set[str]) -> Cut | None:
    choices = {a: list(cps) + ([] if a in failed else [None]) for a, cps in history.checkpoints.items()}
    return maximum([c for c in all_cuts(history, choices) if consistent(history, c)])


def useful(history: History) -> set[tuple[str, int]]:
    choices = {a: [*cps, None] for a, cps in history.checkpoints.items()}
    out = set()
    for cut in all_cuts(history, choices):
        if consistent(history, cut):
            out |= {(a, c) for a, c in cut.items() if c is not None}
    return out


def containing(history: History, fixed: Mapping[str, int]) -> list[Cut]:
    choices = {a: ([fixed[a]] if a in fixed else list(cps)) for a, cps in history.checkpoints.items()}
    return [c for c in all_cuts(history, choices) if consistent(history, c)]
