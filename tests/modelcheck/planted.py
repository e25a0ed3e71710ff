"""Known bugs planted into the core, each with the one invariant that must catch it:
the proof that the checker can fail.

The chaos suite's bugs that live in the core's recovery logic are here (GC keeping
only the newest checkpoint is its `gc-too-eager`, the restore to the newest line its
`restore-ignores-savepoint`, dependencies dropped its `drop-dependency`, the group
running at the first acknowledgement its `early-running`, taken from it as it is); the rest
are off-by-one and ordering slips of the kind a refactor makes: a slice one short, a
bound one late, a bisect on the wrong side, a sort in the wrong direction."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import bisect
from operator import attrgetter

from agent_client import protocol
from chaos import planted as chaos_planted
from coordinator.core import fences, queries, recovery_line, recovery_plan, restore, state_machine
from coordinator.core.commands import DependenciesResult, ReportDependencies
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.model import AgentState


@dataclass(frozen=True)
class Planted:
    module: Any
    attribute: str
    replacement: Callable[..., Any]
    breaks: tuple[str, ...]  # the invariants that must report it, and no other
    bounds: Mapping[str, int]  # the smallest bounds that reach it


def _line_ignoring_a_dependency(usable, current, deps, failed):  # type: ignore[no-untyped-def]
    return recovery_plan.plan_recovery(usable, current, list(deps)[:-1], failed)


def _line_one_checkpoint_too_far(usable, current, deps, failed):  # type: ignore[no-untyped-def]
    """Failed agents never restore their newest checkpoint: still consistent, not maximal."""
    return recovery_plan.plan_recovery({a: (c[:-1] if a in failed else c) for a, c in usable.items()},
                                       current, deps, failed)


def _fence_ignoring_incarnation(state, group, agent_id, token):  # type: ignore[no-untyped-def]
    """Any incarnation may write while the agent is alive."""
    agent = queries.registered_agent(state, group, agent_id)
    if agent.state is AgentState.ALIVE:
        return agent
    raise Rejection.because(ReasonCode.AGENT_NOT_ALIVE, f"agent {agent_id!r} is {agent.state.value}", "agent_id")


def _no_fence_undoes(fence_list: Sequence[Any], generation: int, interval: int) -> None:
    return None


def _gc_keeping_only_the_newest(usable, deps, retention):  # type: ignore[no-untyped-def]
    return {a: (c[-1] if c else 0) for a, c in usable.items()}


def _restore_to_the_newest_checkpoints(state, group, name, usable, deps):  # type: ignore[no-untyped-def]
    """A restore that takes each agent's newest stable checkpoint, not the savepoint's."""
    return 0, {a: (c[-1] if c else 0) for a, c in usable.items()}, set(usable)


_report_dependencies = state_machine.HANDLERS[ReportDependencies]


def _dependencies_dropped(state, cmd, now):  # type: ignore[no-untyped-def]
    """Reports fenced as usual and acknowledged, none stored (the chaos suite's
    `drop-dependency`): recovery lines then ignore every message."""
    _report_dependencies(state, dataclasses.replace(cmd, records=()), now)
    return DependenciesResult(accepted=len(cmd.records))


def _chaos_table_bug(bug: str) -> dict[Any, Any]:
    """The chaos suite's own planted version of a table seam (chaos/planted.py), as the
    whole table with that one entry replaced."""
    (patch,) = chaos_planted.BUGS[bug]()
    table = getattr(patch.owner, patch.attribute)
    return {**table, patch.key: patch.wrap(table[patch.key])}


_undoing = fences.undoing


def _fence_one_interval_late(fence_list, generation, interval):  # type: ignore[no-untyped-def]
    """A send in the first interval after the fence's checkpoint still stands (`>=` for `>`)."""
    return _undoing(fence_list, generation, interval - 1)


def _gc_floor_one_past(usable, deps, retention):  # type: ignore[no-untyped-def]
    """GC keeps from one checkpoint past the all-fail line, deleting the line's own."""
    return {a: k + 1 for a, k in recovery_plan.plan_gc(usable, deps, retention).items()}


def _last_at_or_before(indexes, interval):  # type: ignore[no-untyped-def]
    """The receiver's checkpoint at the receive's interval (bisect_right for bisect_left),
    which holds the orphan's receive."""
    return indexes[bisect.bisect_right(indexes, interval) - 1]


def _oldest_first(name):  # type: ignore[no-untyped-def]
    """The rollback's sort key negated: each sender's messages walked oldest first, so
    the walk stops at the first send still standing and misses newer orphans."""
    key = attrgetter(name)
    return lambda m: -key(m)


def _every_send_undone(line, envelope):  # type: ignore[no-untyped-def]
    """The agent library takes every logged message for one the line undid: a rollback
    then re-delivers nothing, and the messages it took out of the receiver are lost."""
    return True


SMALL = {"agents": 2, "max_index": 1, "leader_changes": 0, "losses": 0}
PLANTED: dict[str, Planted] = {
    "line ignores a dependency": Planted(queries, "plan_recovery", _line_ignoring_a_dependency,
                                         ("recovery_line_consistent",), SMALL),
    "line rolls back too far": Planted(queries, "plan_recovery", _line_one_checkpoint_too_far,
                                       ("recovery_line_maximal",), SMALL),
    "fence ignores the incarnation": Planted(queries, "live_agent", _fence_ignoring_incarnation,
                                             ("fenced_writes_refused",), {**SMALL, "sends": 0, "losses": 1}),
    "rollbacks undo no send": Planted(fences, "undoing", _no_fence_undoes, ("undone_sends_not_delivered",), SMALL),
    "GC keeps only the newest checkpoint": Planted(state_machine, "plan_gc", _gc_keeping_only_the_newest,
                                                   ("gc_keeps_recoverable_checkpoints",),
                                                   {**SMALL, "max_index": 2, "failures": 0}),
    "restore ignores the savepoint": Planted(restore, "_savepoint_line", _restore_to_the_newest_checkpoints,
                                             ("restore_goes_to_the_savepoint",), {**SMALL, "failures": 0, "restores": 1}),
    "dependencies dropped": Planted(state_machine, "HANDLERS",
                                   {**state_machine.HANDLERS, ReportDependencies: _dependencies_dropped},
                                   ("no_orphan_once_recovered", "tokens_conserved"), SMALL),
    "the group runs at the first acknowledgement": Planted(state_machine, "HANDLERS", _chaos_table_bug("early-running"),
                                                        ("running_once_every_rollback_is_acknowledged",), SMALL),
    "fence lets the first undone interval through": Planted(fences, "undoing", _fence_one_interval_late,
                                                        ("undone_sends_not_delivered",), SMALL),
    "GC floor one past the line": Planted(state_machine, "plan_gc", _gc_floor_one_past,
                                          ("gc_keeps_recoverable_checkpoints",), {**SMALL, "failures": 0}),
    "line keeps the receive's checkpoint": Planted(recovery_line, "_last_before", _last_at_or_before,
                                                   ("recovery_line_consistent",), SMALL),
    "rollback walks messages oldest first": Planted(recovery_line, "attrgetter", _oldest_first,
                                                    ("recovery_line_consistent",), {**SMALL, "sends": 2}),
    "rollbacks re-deliver nothing": Planted(protocol, "undone_by", _every_send_undone, ("tokens_conserved",), SMALL),
}
