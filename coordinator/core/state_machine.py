"""The deterministic state machine: apply(state, entry) -> result.

Everything replicas must agree on is decided here, from the entry and the state
alone (time comes from the entry). Rejections are results, never exceptions that
escape: a replicated method that raises would wedge every replica the same way.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from coordinator.core.commands import (
    AbortEpoch, AckOrder, AckResult, CheckpointResult, CommitCheckpoint, CreateGroup, CreateSavepoint,
    DeclareAgentFailed, DeleteGroup, DeleteSavepoint, DependenciesResult, Deregister, EmptyResult, Entry, EpochResult,
    Failure, ForkGroup, ForkResult, GarbageCollect, GcResult, GroupResult, ReadBarrier, RecoveryResult, Register, RegisterResult,
    ReportDependencies, RestoreGroup, RestoreResult, Result, RollbackTarget, SavepointResult, SetRetention, StartEpoch,
    Token, command_target,
)
from coordinator.core import authz, fences, forks, queries, restore, retention, savepoints
from coordinator.core.blob_stores import in_blob_store
from coordinator.core.data_uris import is_inline
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.model import (
    RECENT_EPOCHS, Agent, AgentState, Checkpoint, CheckpointKind, Epoch, EpochState, Fence, Group, GroupState, Mode,
    Order, OrderKind, Savepoint,
)
# Chaos seam: `gc-too-eager` (chaos/planted.py) and the model checker replace state_machine.plan_gc,
# which the GC handler calls by this name.
from coordinator.core.recovery_plan import plan_gc
from coordinator.core.state import State
from coordinator.core.validation import MAX_DEPENDENCIES_PER_AGENT, check_index_step, validate



def apply(state: State, entry: Entry, *, validated: bool = False) -> Result:
    """Apply one committed entry. Writes made before a rejection are discarded by the caller.

    `validated`: the caller has just run validate() on this very command (the leader,
    applying what its proposer checked), so it is not run twice."""
    handler = HANDLERS.get(type(entry.command))
    if handler is None:
        return Failure.of(Rejection.because(ReasonCode.MALFORMED_ENTRY,
                                            f"unknown command {type(entry.command).__name__}"))
    try:
        if not validated:
            validate(entry.command)
        if entry.principal is not None:
            # The proposer checked this already; re-checked here from the entry alone so
            # every replica decides the same, whatever a proposer got wrong.
            authz.check(authz.permits(entry.principal, *command_target(entry.command)))
        return handler(state, entry.command, entry.proposed_at)
    except Rejection as rejection:
        return Failure.of(rejection)
    except Exception as exc:  # a bug must not wedge the cluster; the caller drops the writes
        return Failure.of(Rejection.because(ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))


# ---- lookups -------------------------------------------------------------------

def _group(state: State, name: str) -> Group:
    group = state.group(name)
    if group is None:
        raise Rejection.not_found(f"group {name!r}", ReasonCode.GROUP_NOT_FOUND)
    return group


def _agent(state: State, group: str, agent_id: str) -> Agent:
    return queries.registered_agent(state, group, agent_id)


def fenced_agent(state: State, group: Group, agent_id: str, token: Token) -> Agent:
    """The agent a write comes from, after checking its fencing token.

    Beyond the live-incarnation rule (queries.live_agent), one writing for an epoch the
    group has not started, or one that has not yet obeyed a rollback order, is refused:
    otherwise it could re-create state the recovery just discarded.

    Chaos seam: `accept-stale-epoch` (chaos/planted.py) replaces it with a fence that
    lets an old incarnation through.
    """
    agent = queries.live_agent(state, group.spec.name, agent_id, token)
    if token.epoch > group.current_epoch:
        raise Rejection.because(
            ReasonCode.EPOCH_NOT_STARTED, f"epoch {token.epoch} has not started (current epoch {group.current_epoch})",
            "token.epoch")
    if agent.rollback_order:
        raise Rejection.because(
            ReasonCode.ORDER_PENDING,
            f"rollback order {agent.rollback_order} is pending; restore and acknowledge it first", "agent_id")
    return agent


def _new_order(state: State, group: Group, agent_id: str, kind: OrderKind, **fields: object) -> Group:
    state.put_order(Order(group.spec.name, agent_id, group.next_order_id, kind, **fields))  # type: ignore[arg-type]
    return dataclasses.replace(group, next_order_id=group.next_order_id + 1)


# ---- handlers -------------------------------------------------------------------

def _create_group(state: State, cmd: CreateGroup, now: float) -> Result:
    spec = cmd.spec
    existing = state.group(spec.name)
    if existing is not None:
        if existing.spec == spec:
            return GroupResult(existing)
        raise Rejection.because(ReasonCode.GROUP_SPEC_CONFLICT, f"group {spec.name!r} exists with a different spec",
                                "spec.group")
    group = Group(spec=spec, created_at=now)
    state.put_group(group)
    return GroupResult(group)


def _register(state: State, cmd: Register, now: float) -> Result:
    group = _group(state, cmd.group)
    agent = state.agent(cmd.group, cmd.agent_id)
    left = False
    if agent is None:
        agent = Agent(cmd.group, cmd.agent_id, incarnation=1, registered_at=now, generation=1,
                      secret_hash=cmd.secret_hash)
    else:
        left = agent.state is AgentState.DEREGISTERED
        if agent.state is AgentState.ALIVE:
            # A restart before the lease expired: the old incarnation's volatile
            # state is gone, which is a failure for everyone who depends on it.
            group, _ = _recover(state, group, agent, now)
            agent = state.agent(cmd.group, cmd.agent_id) or agent
        # A failed agent's rollback order already fenced off its lost intervals; one that
        # left and comes back resumes from its newest usable checkpoint, so what it sent
        # after that point is undone the same way.
        agent = dataclasses.replace(agent, incarnation=agent.incarnation + 1, state=AgentState.ALIVE,
                                    registered_at=now, generation=agent.generation + 1,
                                    secret_hash=cmd.secret_hash)
    resume = _resume_point(state, group, agent)
    if left:
        agent = dataclasses.replace(agent, fences=fences.add(
            agent.fences, Fence(agent.agent_id, agent.generation, resume.index if resume else 0)))
    if cmd.agent_id not in group.members:
        group = dataclasses.replace(group, members=tuple(sorted(group.members + (cmd.agent_id,))))
    state.put_agent(agent)
    state.put_group(group)
    return RegisterResult(agent=agent, group=group, resume_from=resume)


def _resume_point(state: State, group: Group, agent: Agent) -> Checkpoint | None:
    """The pending rollback target if there is one, else the newest usable checkpoint."""
    for order in state.orders(group.spec.name):
        if order.agent_id == agent.agent_id and order.kind is OrderKind.ROLL_BACK and not order.acked:
            return state.checkpoint(group.spec.name, agent.agent_id, order.checkpoint_index)
    usable = [c for c in state.checkpoints(group.spec.name, agent.agent_id) if c.stable]
    return usable[-1] if usable else None


def _check_kind(group: Group, cp: Checkpoint) -> None:
    allowed = {
        Mode.COORDINATED: {CheckpointKind.COORDINATED},
        Mode.UNCOORDINATED: {CheckpointKind.BASIC},
    }.get(group.spec.mode, {CheckpointKind.BASIC, CheckpointKind.FORCED})
    if cp.kind not in allowed:
        raise Rejection.because(ReasonCode.WRONG_CHECKPOINT_KIND, f"{group.spec.mode.value} groups take "
                                + " or ".join(sorted(k.value for k in allowed)) + " checkpoints", "checkpoint.kind")


def _commit_checkpoint(state: State, cmd: CommitCheckpoint, now: float) -> Result:
    cp = cmd.checkpoint
    group = _group(state, cp.group)
    _check_kind(group, cp)
    agent = fenced_agent(state, group, cp.agent_id, cmd.token)
    existing = state.checkpoint(group.spec.name, agent.agent_id, cp.index)
    if existing is not None:
        same = dataclasses.replace(existing, created_at=cp.created_at, stable=cp.stable, incarnation=cp.incarnation)
        if same == cp:
            return CheckpointResult(existing, group.stable_epoch)
        raise Rejection.because(ReasonCode.CHECKPOINT_CONFLICT,
                                f"checkpoint {cp.index} of {agent.agent_id!r} exists with other metadata",
                                "checkpoint.index")
    if cp.index <= agent.last_checkpoint_index:
        raise Rejection.because(
            ReasonCode.INDEX_NOT_ABOVE_LAST,
            f"index {cp.index} is not above the agent's last checkpoint {agent.last_checkpoint_index}",
            "checkpoint.index")
    check_index_step(cp.index, agent.last_checkpoint_index)
    if cp.parent_index and state.checkpoint(group.spec.name, agent.agent_id, cp.parent_index) is None:
        raise Rejection.because(ReasonCode.PARENT_MISSING, f"parent checkpoint {cp.parent_index} does not exist",
                                "checkpoint.parent_index")

    epoch = None
    if group.spec.mode is Mode.COORDINATED:
        epoch = state.epoch(group.spec.name, cp.epoch)
        if cp.epoch != group.current_epoch or epoch is None or epoch.state is not EpochState.STARTED:
            raise Rejection.because(
                ReasonCode.NOT_OPEN_EPOCH, f"epoch {cp.epoch} is not the open epoch (current {group.current_epoch}, "
                f"{epoch.state.value if epoch else 'none'})", "checkpoint.epoch")
        if agent.agent_id not in epoch.members:
            raise Rejection.because(ReasonCode.JOINED_AFTER_EPOCH,
                                    f"agent {agent.agent_id!r} joined after epoch {cp.epoch} started",
                                    "checkpoint.epoch")
        if agent.agent_id in epoch.committed:
            raise Rejection.because(ReasonCode.ALREADY_COMMITTED, f"agent already committed epoch {cp.epoch}",
                                    "checkpoint.epoch")
    stable = group.spec.mode is not Mode.COORDINATED  # independent checkpoints are usable once committed
    stored = dataclasses.replace(cp, created_at=now, stable=stable, incarnation=agent.incarnation)
    state.put_checkpoint(stored)
    state.put_agent(dataclasses.replace(agent, last_checkpoint_index=cp.index))
    if epoch is not None:
        for order in state.orders(group.spec.name):
            if order.agent_id == agent.agent_id and order.kind is OrderKind.CHECKPOINT_NOW and order.epoch <= cp.epoch:
                state.delete_order(group.spec.name, order.order_id)
        group = _record_epoch_commit(state, group, epoch, agent.agent_id)
        stored = state.checkpoint(group.spec.name, agent.agent_id, cp.index) or stored
    return CheckpointResult(stored, group.stable_epoch)


def _record_epoch_commit(state: State, group: Group, epoch: Epoch, agent_id: str) -> Group:
    committed = tuple(sorted(epoch.committed + (agent_id,)))
    if set(committed) < set(epoch.members):
        state.put_epoch(dataclasses.replace(epoch, committed=committed))
        return group
    state.put_epoch(dataclasses.replace(epoch, committed=committed, state=EpochState.STABLE))
    for member in epoch.members:
        for cp in state.checkpoints(group.spec.name, member):
            if cp.epoch == epoch.epoch and not cp.stable:
                state.put_checkpoint(dataclasses.replace(cp, stable=True))
    group = dataclasses.replace(group, stable_epoch=epoch.epoch)
    state.put_group(group)
    return group


def _report_dependencies(state: State, cmd: ReportDependencies, now: float) -> Result:
    """Refuse the whole report if one record is an orphan: a send its sender's rollback
    undid. The receiver reports before delivering (by default), so the refusal keeps
    the message from being delivered at all."""
    group = _group(state, cmd.group)
    fenced_agent(state, group, cmd.agent_id, cmd.token)
    senders: dict[str, Agent | None] = {}
    for i, rec in enumerate(cmd.records):
        if rec.sender not in senders:
            senders[rec.sender] = state.agent(group.spec.name, rec.sender)
        sender = senders[rec.sender]
        if sender is None:
            # An agent sends only once registered, and its Register is applied before any
            # report of what it sent; one that left stays known (its fences judge it).
            raise Rejection.because(ReasonCode.AGENT_NOT_FOUND,
                                    f"sender {rec.sender!r} of message {rec.message_id!r} never registered in group "
                                    f"{group.spec.name!r}", f"records[{i}].sender")
        fence = fences.undoing(sender.fences, rec.send_generation, rec.send_interval)
        if fence:
            raise Rejection.because(
                ReasonCode.ORPHAN_MESSAGE,
                f"orphan message {rec.message_id!r}: {rec.sender!r} sent it in interval {rec.send_interval} of "
                f"generation {rec.send_generation}, which its rollback to checkpoint {fence.index} (generation "
                f"{fence.generation}) undid", f"records[{i}]")
    held = state.dependency_count(group.spec.name, cmd.agent_id)
    if held + len(cmd.records) > MAX_DEPENDENCIES_PER_AGENT:
        raise Rejection.because(
            ReasonCode.DEPENDENCY_QUOTA,
            f"agent {cmd.agent_id!r} holds {held} dependency records; with these {len(cmd.records)} it would pass "
            f"the {MAX_DEPENDENCIES_PER_AGENT} an agent may hold: checkpoint, and garbage-collect the group, "
            "to drop those below the recovery line", "records")
    state.put_dependencies(group.spec.name, cmd.agent_id, cmd.records)
    return DependenciesResult(accepted=len(cmd.records))


def _start_epoch(state: State, cmd: StartEpoch, now: float) -> Result:
    group = _group(state, cmd.group)
    if group.spec.mode is not Mode.COORDINATED:
        raise Rejection.because(ReasonCode.NOT_COORDINATED,
                                f"group {group.spec.name!r} is {group.spec.mode.value}, not coordinated")
    if group.state is not GroupState.RUNNING:
        raise Rejection.because(ReasonCode.GROUP_RECOVERING, f"group {group.spec.name!r} is {group.state.value}")
    current = state.epoch(group.spec.name, group.current_epoch)
    if current is not None and current.state is EpochState.STARTED:
        raise Rejection.because(ReasonCode.EPOCH_STILL_OPEN, f"epoch {current.epoch} is still open")
    members = tuple(a.agent_id for a in state.agents(group.spec.name) if a.state is AgentState.ALIVE)
    if not members:
        raise Rejection.because(ReasonCode.NO_LIVE_MEMBERS, f"group {group.spec.name!r} has no live members")
    number = group.current_epoch + 1
    epoch = Epoch(group.spec.name, number, EpochState.STARTED, members, started_at=now,
                  deadline=now + group.spec.epoch_timeout_s)
    state.put_epoch(epoch)
    group = dataclasses.replace(group, current_epoch=number)
    for member in members:
        group = _new_order(state, group, member, OrderKind.CHECKPOINT_NOW, epoch=number)
    state.put_group(group)
    return EpochResult(epoch)


def _abort_epoch(state: State, cmd: AbortEpoch, now: float) -> Result:
    group = _group(state, cmd.group)
    epoch = state.epoch(group.spec.name, cmd.epoch)
    if epoch is None:
        raise Rejection.not_found(f"epoch {cmd.epoch} of group {cmd.group!r}", ReasonCode.EPOCH_NOT_FOUND)
    if epoch.state is EpochState.STARTED:
        epoch = _abort(state, group, epoch, cmd.reason or "aborted")
    return EpochResult(epoch)


def _abort(state: State, group: Group, epoch: Epoch, reason: str) -> Epoch:
    """Abort an open epoch; the previous stable epoch stays the recovery line."""
    epoch = dataclasses.replace(epoch, state=EpochState.ABORTED, reason=reason)
    state.put_epoch(epoch)
    for order in state.orders(group.spec.name):
        if order.kind is OrderKind.CHECKPOINT_NOW and order.epoch == epoch.epoch:
            state.delete_order(group.spec.name, order.order_id)
    return epoch


def _declare_failed(state: State, cmd: DeclareAgentFailed, now: float) -> Result:
    group = _group(state, cmd.group)
    agent = _agent(state, cmd.group, cmd.agent_id)
    if not queries.is_live(agent, cmd.incarnation):
        # The agent re-registered or was already declared failed: nothing to do.
        return RecoveryResult(group.recovery_id, ())
    group, targets = _recover(state, group, agent, now)
    return RecoveryResult(group.recovery_id, targets)


def _recover(state: State, group: Group, failed: Agent, now: float) -> tuple[Group, tuple[RollbackTarget, ...]]:
    """Mark `failed` failed, compute the recovery line (queries.plan_for, which the
    what-if answers from too) and queue rollback orders."""
    name = group.spec.name
    state.put_agent(dataclasses.replace(failed, state=AgentState.FAILED))
    _supersede(state, group, f"agent {failed.agent_id} failed")
    targets = queries.plan_for(state, name, {failed.agent_id})
    return _roll_back(state, group, targets), targets


def _supersede(state: State, group: Group, reason: str) -> None:
    """Make way for a new recovery line: abort the open epoch (its checkpoints are not
    on any line) and delete the rollback orders not yet acknowledged. The new line is
    computed with their agents counted as failed (queries.recovery_inputs), so it is at
    or below the line they were ordered to: a recovery (or a restore) decided later in
    the log always wins, and never leaves an agent above what an earlier one undid."""
    name = group.spec.name
    if group.current_epoch:
        current = state.epoch(name, group.current_epoch)
        if current is not None and current.state is EpochState.STARTED:
            _abort(state, group, current, reason)
    for order in state.orders(name):
        if order.kind is OrderKind.ROLL_BACK and not order.acked:
            state.delete_order(name, order.order_id)


def _roll_back(state: State, group: Group, targets: tuple[RollbackTarget, ...]) -> Group:
    """Order each target's agent back to its checkpoint as one recovery: a new
    generation and a fence undoing its later sends, its later checkpoints and
    dependency records deleted, the group recovering until every order is acknowledged."""
    name = group.spec.name
    group = dataclasses.replace(group, recovery_id=group.recovery_id + 1, state=GroupState.RECOVERING)
    rolled_back = {t.agent_id: t.checkpoint_index for t in targets}
    line = tuple(Fence(t.agent_id, (_agent(state, name, t.agent_id).generation + 1), t.checkpoint_index)
                 for t in targets)
    for fence in line:
        for cp in state.checkpoints(name, fence.agent_id):
            if cp.index > fence.index:
                state.delete_checkpoint(name, fence.agent_id, cp.index)
        agent = _agent(state, name, fence.agent_id)
        state.put_agent(dataclasses.replace(agent, last_checkpoint_index=fence.index, generation=fence.generation,
                                            fences=fences.add(agent.fences, fence),
                                            rollback_order=group.next_order_id))
        group = _new_order(state, group, fence.agent_id, OrderKind.ROLL_BACK, checkpoint_index=fence.index,
                           recovery_id=group.recovery_id, generation=fence.generation, line=line)
    state.drop_dependencies(name, lambda dep: (
        (dep.receiver in rolled_back and dep.receive_interval > rolled_back[dep.receiver])
        or (dep.sender in rolled_back and dep.send_interval > rolled_back[dep.sender])))
    if not rolled_back:
        group = dataclasses.replace(group, state=GroupState.RUNNING)
    state.put_group(group)
    return group


def _restore_group(state: State, cmd: RestoreGroup, now: float) -> Result:
    """A recovery to the line core.restore chooses, applied as a failure's is. One in
    progress is superseded (_supersede): its agents are counted as failed, which the
    restore line, made of checkpoints that still exist, is at or below anyway."""
    group = _group(state, cmd.group)
    plan = restore.plan(state, group, cmd.savepoint, cmd.containing)
    target = f"savepoint {cmd.savepoint}" if cmd.savepoint else "a chosen line"
    _supersede(state, group, f"restore to {target}")
    if group.spec.mode is Mode.COORDINATED:
        group = _rewind_epochs(state, group, plan.epoch, target)
    group = _roll_back(state, group, plan.targets())
    return RestoreResult(group.recovery_id, plan.steps, plan.epoch)


def _rewind_epochs(state: State, group: Group, epoch: int, target: str) -> Group:
    """The restored epoch is the stable one again; the stable epochs after it are
    aborted (the restore deletes their checkpoints), so no later cut or savepoint takes them."""
    for later in state.epochs(group.spec.name):
        if later.epoch > epoch and later.state is EpochState.STABLE:
            state.put_epoch(dataclasses.replace(later, state=EpochState.ABORTED,
                                                reason=f"undone by restore to {target}"))
    group = dataclasses.replace(group, stable_epoch=epoch)
    state.put_group(group)
    return group


def _fork_group(state: State, cmd: ForkGroup, now: float) -> Result:
    """A new group beside the source holding its savepoint's cut (core.forks says what)."""
    fork = forks.plan(state, cmd, now)
    state.put_group(fork.group)
    for agent in fork.agents:
        state.put_agent(agent)
    for checkpoint in fork.checkpoints:
        state.put_checkpoint(checkpoint)
    if fork.epoch is not None:
        state.put_epoch(fork.epoch)
    return ForkResult(fork.group, fork.checkpoints)


def _ack_order(state: State, cmd: AckOrder, now: float) -> Result:
    group = _group(state, cmd.group)
    agent = queries.live_agent(state, cmd.group, cmd.agent_id, cmd.token)
    order = next((o for o in state.orders(cmd.group) if o.order_id == cmd.order_id), None)
    if order is None:
        return AckResult(group.state)  # already acknowledged and removed, or superseded
    if order.agent_id != cmd.agent_id:
        raise Rejection.because(ReasonCode.ORDER_NOT_ADDRESSED,
                                f"order {cmd.order_id} is not addressed to {cmd.agent_id!r}", "order_id")
    state.delete_order(cmd.group, order.order_id)
    if agent.rollback_order == order.order_id:
        state.put_agent(dataclasses.replace(agent, rollback_order=0))
    outstanding = [o for o in state.orders(cmd.group) if o.kind is OrderKind.ROLL_BACK and o.order_id != order.order_id]
    if group.state is GroupState.RECOVERING and not outstanding:
        group = dataclasses.replace(group, state=GroupState.RUNNING)
        state.put_group(group)
    return AckResult(group.state)


def _deregister(state: State, cmd: Deregister, now: float) -> Result:
    group = _group(state, cmd.group)
    agent = fenced_agent(state, group, cmd.agent_id, cmd.token)
    state.put_agent(dataclasses.replace(agent, state=AgentState.DEREGISTERED))
    state.put_group(dataclasses.replace(group, members=tuple(m for m in group.members if m != cmd.agent_id)))
    return EmptyResult()


def _garbage_collect(state: State, cmd: GarbageCollect, now: float) -> Result:
    group = _group(state, cmd.group)
    if group.state is not GroupState.RUNNING:
        raise Rejection.because(ReasonCode.GROUP_RECOVERING,
                                f"group {group.spec.name!r} is {group.state.value}; collect after recovery")
    name = group.spec.name
    agents = [a for a in state.agents(name) if a.state is not AgentState.DEREGISTERED]
    all_cps = {a.agent_id: state.checkpoints(name, a.agent_id) for a in agents}
    usable = {a: [c.index for c in cps if c.stable] for a, cps in all_cps.items()}
    keep_from = plan_gc(usable, state.dependencies(name), group.spec.retention)
    held = savepoints.lowest(state.savepoints(name))
    for agent in agents:
        floor = min(keep_from[agent.agent_id], held.get(agent.agent_id, keep_from[agent.agent_id]))
        if floor > agent.rollback_floor:
            state.put_agent(dataclasses.replace(agent, rollback_floor=floor))
    for epoch in state.epochs(name)[:-RECENT_EPOCHS]:
        state.delete_epoch(name, epoch.epoch)
    released: list[Checkpoint] = []
    pinned = savepoints.pinned(state.savepoints(name))
    for agent_id, cps in sorted(all_cps.items()):
        # A checkpoint is kept if a future recovery line may need it, a savepoint holds it
        # or the retention policy selects it; so is the parent a kept checkpoint was
        # written against.
        kept = ({c.index for c in cps if c.index >= keep_from[agent_id]} | pinned.get(agent_id, set())
                | retention.selected(cps, group.retention_policy, now))
        referenced = {c.parent_index for c in cps if c.index in kept}
        for cp in cps:
            if cp.index not in kept and cp.index not in referenced and in_blob_store(cp.blob_uri, cmd.blob_store):
                state.delete_checkpoint(name, agent_id, cp.index)
                released.append(cp)
    return _released(released)


def _released(cps: Sequence[Checkpoint]) -> GcResult:
    """Checkpoints the state no longer holds, as the client deletes them: the blob URIs
    to delete (none for a state held inline: it went with its record), their bytes."""
    return GcResult(tuple(cp.blob_uri for cp in cps if not is_inline(cp.blob_uri)), sum(cp.size for cp in cps),
                    len(cps))


def _delete_group(state: State, cmd: DeleteGroup, now: float) -> Result:
    """Only a finished group: deleting one whose agents still run would strand them
    (their next write finds no group) and lose the checkpoints they recover from."""
    group = _group(state, cmd.group)
    name = group.spec.name
    agents = state.agents(name)
    alive = sorted(a.agent_id for a in agents if a.state is AgentState.ALIVE)
    if alive:
        raise Rejection.because(ReasonCode.GROUP_IN_USE,
                                f"group {name!r} has {len(alive)} live agents (first: {alive[0]!r}); "
                                "deregister them first", "group")
    cps = [cp for a in agents for cp in state.checkpoints(name, a.agent_id)]
    state.delete_group(name)
    return _released(cps)


def _create_savepoint(state: State, cmd: CreateSavepoint, now: float) -> Result:
    group = _group(state, cmd.group)
    name = group.spec.name
    if state.savepoint(name, cmd.name) is not None:
        raise Rejection.because(ReasonCode.SAVEPOINT_EXISTS,
                                f"group {name!r} has a savepoint {cmd.name!r} already: delete it first or choose "
                                "another name", "name")
    epoch, saved = savepoints.cut(state, group)
    savepoint = Savepoint(name, cmd.name, saved, epoch, dict(sorted(cmd.labels.items())), now)
    state.put_savepoint(savepoint)
    return SavepointResult(savepoint)


def _delete_savepoint(state: State, cmd: DeleteSavepoint, now: float) -> Result:
    group = _group(state, cmd.group)
    savepoint = state.savepoint(group.spec.name, cmd.name)
    if savepoint is None:
        raise Rejection.not_found(f"savepoint {cmd.name!r} of group {cmd.group!r}", ReasonCode.SAVEPOINT_NOT_FOUND)
    state.delete_savepoint(group.spec.name, cmd.name)
    return SavepointResult(savepoint)


def _set_retention(state: State, cmd: SetRetention, now: float) -> Result:
    group = dataclasses.replace(_group(state, cmd.group), retention_policy=cmd.policy)
    state.put_group(group)
    return GroupResult(group)


def _read_barrier(state: State, cmd: ReadBarrier, now: float) -> Result:
    return EmptyResult()


# The handler of each command, looked up by apply() at every entry; each takes the
# command of its key's type, which a dict's type cannot say.
# Chaos seam: `accept-stale-epoch`, `drop-dependency` and `early-running` (chaos/planted.py)
# replace the handlers of CommitCheckpoint, ReportDependencies and AckOrder.
HANDLERS: dict[type, Callable[[State, Any, float], Result]] = {
    CreateGroup: _create_group,
    Register: _register,
    CommitCheckpoint: _commit_checkpoint,
    ReportDependencies: _report_dependencies,
    StartEpoch: _start_epoch,
    AbortEpoch: _abort_epoch,
    DeclareAgentFailed: _declare_failed,
    AckOrder: _ack_order,
    Deregister: _deregister,
    GarbageCollect: _garbage_collect,
    DeleteGroup: _delete_group,
    ReadBarrier: _read_barrier,
    CreateSavepoint: _create_savepoint,
    DeleteSavepoint: _delete_savepoint,
    SetRetention: _set_retention,
    RestoreGroup: _restore_group,
    ForkGroup: _fork_group,
}
