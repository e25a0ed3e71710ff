"""What must hold in every reachable state and across every transition.

Each invariant is a named function returning None when it holds, else what it saw.
The recovery-line ones judge the core against tests/oracle's brute force (every cut
enumerated), never against coordinator.core.recovery_line; the orphan ones judge it
against the model's ghost record of which sends a process really undid.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from coordinator.core import commands as c
from coordinator.core.history import History
from coordinator.core.model import AgentState, EpochState, GroupState, Mode, OrderKind
from coordinator.core.recovery_plan import build_history
from tests.modelcheck.memo import Memo
from tests.modelcheck.replica import View, view_of
from tests.modelcheck.world import GROUP, Applied, Step, World
from tests.oracle import brute_force as bf

StateCheck = Callable[[World, View], "str | None"]
StepCheck = Callable[[Step], "str | None"]


# ---- recovery inputs, stated independently of coordinator.core.queries --------------------

def _history(view: View) -> tuple[History, set[str]]:
    """The history a recovery judges (stable checkpoints and reported dependencies of the
    members) and the agents already failed or still owing a rollback."""
    agents = [a for a in view.agents() if a.state is not AgentState.DEREGISTERED]
    usable = {a.agent_id: [cp.index for cp in view.checkpoints(a.agent_id) if cp.stable] for a in agents}
    owing = {a.agent_id for a in agents if a.state is AgentState.FAILED or a.rollback_order}
    return build_history(usable, view.dependencies()), owing


def _recoveries(step: Step) -> list[tuple[Applied, str, View, View]]:
    """Each entry of the step that started a recovery, with the agent whose failure did."""
    found = []
    for applied in step.applied:
        if not applied.changed or not isinstance(applied.command, (c.DeclareAgentFailed, c.Register)):
            continue
        before, after = view_of(applied.before, GROUP), view_of(applied.after, GROUP)
        if after.group().recovery_id > before.group().recovery_id:
            found.append((applied, applied.command.agent_id, before, after))
    return found


def recoveries_started(step: Step) -> int:
    return len(_recoveries(step))


def _restores(step: Step) -> list[tuple[Applied, View, View]]:
    """Each restore the step applied."""
    return [(a, view_of(a.before, GROUP), view_of(a.after, GROUP)) for a in step.applied
            if a.changed and isinstance(a.command, c.RestoreGroup)]


def restores_applied(step: Step) -> int:
    return len(_restores(step))


def _ordered(after: View) -> dict[str, list[int]]:
    recovery = after.group().recovery_id
    out: dict[str, list[int]] = {}
    for order in after.orders():
        if order.kind is OrderKind.ROLL_BACK and order.recovery_id == recovery:
            out.setdefault(order.agent_id, []).append(order.checkpoint_index)
    return out


def recovery_line_consistent(step: Step) -> str | None:
    """The line a recovery orders is a consistent cut: no agent keeps a receive whose
    send the line undoes, and every failed agent rolls back."""
    for _, failed, before, after in _recoveries(step):
        history, owing = _history(before)
        ordered = _ordered(after)
        cut = {a: (ordered[a][0] if a in ordered else None) for a in history.checkpoints}
        kept = sorted(a for a in owing | {failed} if a in history.checkpoints and cut[a] is None)
        if kept:
            return f"failed agents {kept} are not ordered back (line {cut})"
        if not bf.consistent(history, cut):
            return f"line {cut} after {failed} failed leaves an orphan; dependencies {list(history.messages)}"
    return None


CACHE_LIMIT = 1 << 16
_LINES: Memo[tuple, "bf.Cut | None"] = Memo(CACHE_LIMIT)


def _newest_line(history: History, failed: set[str]) -> bf.Cut | None:
    """bf.recovery_line, remembered: the brute force enumerates every cut, and the
    same history recurs in every interleaving that reaches it."""
    key = (tuple(sorted(history.checkpoints.items())), history.messages, frozenset(failed))
    if key not in _LINES:
        return _LINES.remember(key, bf.recovery_line(history, failed))
    return _LINES[key]


def recovery_line_maximal(step: Step) -> str | None:
    """A consistent line is the newest consistent one (brute force over every cut); an
    inconsistent one is recovery_line_consistent's to report."""
    if recovery_line_consistent(step) is not None:
        return None
    for _, failed, before, after in _recoveries(step):
        history, owing = _history(before)
        best = _newest_line(history, (owing | {failed}) & set(history.checkpoints))
        want = {a: i for a, i in (best or {}).items() if i is not None}
        got = {a: idx[0] for a, idx in _ordered(after).items()}
        if got != want:
            return f"after {failed} failed the orders roll back to {got}; the newest consistent line is {want}"
    return None


def restore_goes_to_the_savepoint(step: Step) -> str | None:
    """A restore orders every member that has not left back to its checkpoint in the
    savepoint (its initial state if it joined later), whatever recovery was pending,
    and that line is a consistent cut of the history as it stands (brute force)."""
    for applied, before, after in _restores(step):
        savepoint = before.state.savepoint(GROUP, applied.command.savepoint)
        if savepoint is None:
            return f"{applied.request_id} was applied to a savepoint that does not exist"
        saved = {s.agent_id: s.index for s in savepoint.checkpoints}
        history, _ = _history(before)
        want = {a: saved.get(a, 0) for a in history.checkpoints}
        got = {a: idx[0] for a, idx in _ordered(after).items()}
        if got != want:
            return f"the restore orders {got}; the savepoint holds {want}"
        if not bf.consistent(history, want):
            return f"the savepoint {want} is no longer consistent; dependencies {list(history.messages)}"
    return None


def ordered_back_once(world: World, view: View) -> str | None:
    """Per recovery, exactly one rollback order per agent the line rolls back; an agent
    owes at most one at a time."""
    per_recovery = Counter((o.recovery_id, o.agent_id) for o in view.orders() if o.kind is OrderKind.ROLL_BACK)
    twice = [k for k, n in per_recovery.items() if n > 1]
    if twice:
        return f"(recovery, agent) ordered back more than once: {twice}"
    unacked = Counter(o.agent_id for o in view.orders() if o.kind is OrderKind.ROLL_BACK and not o.acked)
    many = [a for a, n in unacked.items() if n > 1]
    return f"agents owing several rollbacks at once: {many}" if many else None


def fenced_writes_refused(step: Step) -> str | None:
    """No write of a fenced incarnation (not the live one, or owing a rollback) or for a
    closed or unstarted epoch changes the state."""
    for applied in step.applied:
        cmd = applied.command
        if not applied.changed or not isinstance(cmd, (c.CommitCheckpoint, c.ReportDependencies, c.Deregister)):
            continue
        agent_id = cmd.checkpoint.agent_id if isinstance(cmd, c.CommitCheckpoint) else cmd.agent_id
        before = view_of(applied.before, GROUP)
        agent, group = before.agent(agent_id), before.group()
        if agent is None or agent.incarnation != cmd.token.incarnation or agent.state is not AgentState.ALIVE:
            return f"{applied.request_id} from incarnation {cmd.token.incarnation} of {agent_id} accepted ({agent})"
        if agent.rollback_order:
            return f"{applied.request_id} accepted while {agent_id} owes rollback order {agent.rollback_order}"
        if cmd.token.epoch > group.current_epoch:
            return f"{applied.request_id} accepted for epoch {cmd.token.epoch} > current {group.current_epoch}"
        if isinstance(cmd, c.CommitCheckpoint) and group.spec.mode is Mode.COORDINATED:
            epoch = before.epoch(cmd.checkpoint.epoch)
            if epoch is None or epoch.state is not EpochState.STARTED:
                return f"{applied.request_id} accepted for epoch {cmd.checkpoint.epoch}, which is not open ({epoch})"
    return None


def undone_sends_not_delivered(step: Step) -> str | None:
    """A receive is accepted only if the sender has not undone the send."""
    undone = step.before.undone | step.after.undone
    for applied in step.applied:
        if applied.changed and isinstance(applied.command, c.ReportDependencies):
            late = [r.message_id for r in applied.command.records if r.message_id in undone]
            if late:
                return f"{applied.command.agent_id} was let deliver {late}, whose sends were undone"
    return None


def _recovered(world: World, view: View) -> bool:
    """No recovery is pending and every process runs its live incarnation, with no
    write to retry."""
    group = view.group()
    if group.state is not GroupState.RUNNING or any(o.kind is OrderKind.ROLL_BACK for o in view.orders()):
        return False
    for name, proc in zip(sorted(a.agent_id for a in view.agents()), world.procs):
        agent = view.agent(name)
        if (not proc.up or proc.pending is not None or agent is None or agent.incarnation != proc.incarnation
                or agent.state is not AgentState.ALIVE):
            return False
    return True


def no_orphan_once_recovered(world: World, view: View) -> str | None:
    """Once recovered, no agent's state holds a message whose send was undone."""
    if not _recovered(world, view):
        return None
    orphans = [(name, h.mid) for name, p in zip(sorted(a.agent_id for a in view.agents()), world.procs)
               for h in p.held if h.mid in world.undone]
    return f"recovered, yet agents hold messages whose sends were undone: {orphans}" if orphans else None


def tokens_conserved(world: World, view: View) -> str | None:
    """The demo's conservation law, each message carrying one token: once recovered and
    every re-delivery made, the tokens the agents' states hold and those in transit add
    up to the tokens sent by sends that still stand. An orphan counts one too many; a
    message a rollback took out of its receiver and did not deliver again, one too few."""
    if not _recovered(world, view) or any(p.backlog or p.starting for p in world.procs):
        return None
    standing = {s.mid for s in world.sends if s.mid not in world.undone}
    held = Counter(h.mid for p in world.procs for h in p.held)
    transit = {m.mid for m in world.net if m.mid in standing and not held[m.mid]}
    owed = Counter(standing - transit)  # each standing token once, in a state or in transit
    if held == owed:
        return None
    return (f"recovered, yet the states hold {sorted((held - owed).elements())} too many and miss "
            f"{sorted((owed - held).elements())} (in transit: {sorted(transit)}, sends standing: {sorted(standing)})")


def running_once_every_rollback_is_acknowledged(world: World, view: View) -> str | None:
    """A recovering group runs again only once every rollback order of its recovery is
    acknowledged: an agent still owing one may hold an orphan while its peers go on."""
    if view.group().state is not GroupState.RUNNING:
        return None
    owed = [(o.agent_id, o.order_id) for o in view.orders() if o.kind is OrderKind.ROLL_BACK and not o.acked]
    return f"the group runs while rollback orders are owed: {owed}" if owed else None


def needed_checkpoints_kept(world: World, view: View) -> str | None:
    """Every checkpoint a pending rollback order names is still registered and its blob
    still there, and every restore found its checkpoint's blob."""
    if world.missing:
        return f"a restore found no blob for {sorted(world.missing)}"
    names = sorted(a.agent_id for a in view.agents())
    for order in view.orders():
        if order.kind is not OrderKind.ROLL_BACK or not order.checkpoint_index:
            continue
        proc = world.procs[names.index(order.agent_id)]
        record = view.state.checkpoint(GROUP, order.agent_id, order.checkpoint_index)
        if record is None or not any(s.uri == record.blob_uri for s in proc.saved):
            return (f"rollback order {order.order_id} names checkpoint {order.checkpoint_index} of "
                    f"{order.agent_id}: record {record}, blobs {[s.uri for s in proc.saved]}")
    return None


CIC_MODES = frozenset({Mode.CIC_BCS, Mode.CIC_HMNR, Mode.CIC_FDAS})
_USEFUL: Memo[tuple, "str | None"] = Memo(CACHE_LIMIT)


def cic_checkpoints_useful(world: World, view: View) -> str | None:
    """In the CIC modes no stored checkpoint is useless (on a Z-cycle, in no consistent
    cut): the guarantee the agent library's forcing rules exist for, kept across
    rollbacks that restore a rule's state from a checkpoint."""
    if view.group().spec.mode not in CIC_MODES:
        return None
    history, _ = _history(view)
    key = (tuple(sorted(history.checkpoints.items())), history.messages)
    if key not in _USEFUL:
        useful = bf.useful(history)
        useless = sorted((a, i) for a, cps in history.checkpoints.items() for i in cps if i and (a, i) not in useful)
        return _USEFUL.remember(key, f"checkpoints {useless} are in no consistent cut; dependencies "
                                     f"{list(history.messages)}" if useless else None)
    return _USEFUL[key]


def gc_keeps_recoverable_checkpoints(step: Step) -> str | None:
    """Garbage collection deletes only checkpoints below the line of "every agent fails
    now", which every future recovery line is at or above."""
    for applied in step.applied:
        if not applied.changed or not isinstance(applied.command, c.GarbageCollect):
            continue
        before, after = view_of(applied.before, GROUP), view_of(applied.after, GROUP)
        history, _ = _history(before)
        floor = _newest_line(history, set(history.checkpoints)) or {}
        for agent in history.checkpoints:
            kept = {cp.index for cp in after.checkpoints(agent)}
            gone = [cp.index for cp in before.checkpoints(agent) if cp.index not in kept]
            needed = [i for i in gone if i >= (floor.get(agent) or 0)]
            if needed:
                return f"garbage collection deleted {agent}'s checkpoints {needed}; the all-fail line is {floor}"
    return None


STATE_CHECKS: dict[str, StateCheck] = {f.__name__: f for f in (
    ordered_back_once, no_orphan_once_recovered, tokens_conserved, running_once_every_rollback_is_acknowledged,
    needed_checkpoints_kept, cic_checkpoints_useful)}
STEP_CHECKS: dict[str, StepCheck] = {f.__name__: f for f in (
    recovery_line_consistent, recovery_line_maximal, fenced_writes_refused, undone_sends_not_delivered,
    gc_keeps_recoverable_checkpoints, restore_goes_to_the_savepoint)}
