"""Deliberate bugs for coordinator nodes, to prove the chaos checker catches each.

A node runs with one through `python -m chaos.node --bug NAME coordinator ...`: the
bug is monkeypatched in before `raftpoint.cli.main` runs; nothing in coordinator/
knows about it. Bugs:

- `no-dedupe`: the applier ignores the request-id table, so a retried request is
  applied again (a retried Register bumps the incarnation and starts a recovery).
- `accept-stale-epoch`: fencing accepts an old incarnation (with its secret) and an
  epoch that is not open (a commit for another epoch is counted for the open one).
- `skip-fsync`: LMDB commits without sync and every fsync helper of
  coordinator.fsutil does nothing, so an acknowledgement no longer means durable.
- `stale-read`: reads skip the leadership check and the read barrier, so a follower or a deposed leader
  answers from whatever it has applied.
- `gc-too-eager`: GC keeps only each agent's newest usable checkpoint, collecting
  ones a recovery line or the retention still needs.
- `stale-list`: ListCheckpoints answers from a copy up to STALE_LIST_LAG_S old, as
  a lagging replica would.
- `drop-dependency`: dependency reports are acknowledged but not stored, so recovery
  lines no longer see the messages.
- `early-running`: the group returns to RUNNING as soon as any one rollback order
  of its recovery is acknowledged, while the others are still outstanding.
- `skip-authz`: the authorization decision allows everything (as admin), in the
  transport and in the state machine's re-check alike.
- `short-lease`: the leader's lease table grants a tenth of the group's TTL and
  forgets that open sessions hold their agents' leases, so agents keeping their leases
  as the client does are declared failed.
- `repaired-votes`: a node whose log was lost (`raftpoint repair --from-peers`)
  takes it as rebuilt the first time it looks (DurableJournal.log_lost_in_term), so
  it votes and stands for election at once: beside a stale node it elects a leader
  that lacks writes it had acknowledged itself.
- `auth-fail-closed`: an auth file that no longer parses grants nothing (as an
  empty file would) until it is fixed, instead of leaving its last good version in
  force: while the bindings or tokens file has a typo every call is refused, and
  every agent's lease runs out.
- `skip-replay`: a restarted node takes its store to hold every entry its journal
  holds: until its first commit the store reports max(its applied index, the index
  of the journal's last record), so the replay skips the committed entries the store
  had not committed yet (and any entry a new leader writes at those indexes). After
  a power loss the nodes that skipped them can be the majority: writes acknowledged
  just before it are gone.
- `unbounded-clock`: a leader's clock is not held to its voters' clocks
  (VoterClocks never agrees on a time), so a node booted with its clock far ahead
  stamps the replicated dedupe clock with it once it leads.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable


def _no_dedupe() -> None:
    from coordinator.replication import applier
    from coordinator.storage import keys
    from coordinator.storage.state import RESULT, KvState

    results = keys.prefix(RESULT)

    class Forgetful(KvState):
        def raw(self, key: bytes) -> bytes | None:
            return None if key.startswith(results) else super().raw(key)

    applier.KvState = Forgetful  # type: ignore[misc]


def _accept_stale_epoch() -> None:
    from coordinator.core import state_machine
    from coordinator.core.commands import CommitCheckpoint, Token
    from coordinator.core.model import Mode

    fenced = state_machine._fenced_agent

    def lenient(state: Any, group: Any, agent_id: str, token: Token) -> Any:
        agent = state.agent(group.spec.name, agent_id)
        if agent is not None:
            # The whole fence gives way: the old incarnation's number and its secret.
            token = dataclasses.replace(token, incarnation=agent.incarnation, secret_hash=agent.secret_hash,
                                        epoch=min(token.epoch, group.current_epoch))
        return fenced(state, group, agent_id, token)

    commit = state_machine._HANDLERS[CommitCheckpoint]

    def commit_any_epoch(state: Any, cmd: CommitCheckpoint, now: float) -> Any:
        group = state.group(cmd.checkpoint.group)
        if group is not None and group.spec.mode is Mode.COORDINATED and cmd.checkpoint.epoch != group.current_epoch:
            cmd = dataclasses.replace(cmd, checkpoint=dataclasses.replace(cmd.checkpoint, epoch=group.current_epoch))
        return commit(state, cmd, now)

    state_machine._fenced_agent = lenient
    state_machine._HANDLERS[CommitCheckpoint] = commit_any_epoch


def _skip_fsync() -> None:
    # fsutil first: modules imported later bind the no-ops by name.
    from coordinator import fsutil

    for name in dir(fsutil):
        if name.startswith("fsync") and callable(getattr(fsutil, name)):
            setattr(fsutil, name, lambda *args, **kwargs: None)
    from coordinator.storage import lmdb_env

    open_env = lmdb_env.open_env

    def unsynced(path: Any, **options: object) -> Any:
        if "sync" in options:
            options.update(sync=False, metasync=False)
        return open_env(path, **options)

    lmdb_env.open_env = unsynced


def _stale_read() -> None:
    from coordinator.replication.batcher import Batcher
    from coordinator.transport.proposer import Proposer

    async def no_barrier(self: Batcher) -> None:
        return None

    async def no_read_point(self: Proposer) -> None:
        return None  # neither the leadership check nor the barrier

    Batcher.barrier = no_barrier  # type: ignore[method-assign]
    Proposer.read_point = no_read_point  # type: ignore[method-assign]


def _gc_too_eager() -> None:
    from coordinator.core import state_machine

    def newest_only(usable: Any, deps: Any, retention: int) -> dict[str, int]:
        return {agent: max(indexes, default=0) for agent, indexes in usable.items()}

    state_machine.plan_gc = newest_only


STALE_LIST_LAG_S = 2.0


def _stale_list() -> None:
    import time

    from coordinator.transport.servicers import AdminServicer

    fresh = AdminServicer.ListCheckpoints
    copies: dict[tuple[str, str], tuple[float, Any]] = {}

    async def lagging(self: AdminServicer, request: Any, context: Any) -> Any:
        key = (request.group, request.agent_id)
        copy = copies.get(key)
        if copy is not None and time.monotonic() - copy[0] < STALE_LIST_LAG_S:
            return copy[1]
        response = await fresh(self, request, context)
        copies[key] = (time.monotonic(), response)
        return response

    AdminServicer.ListCheckpoints = lagging  # type: ignore[method-assign]


def _drop_dependency() -> None:
    from coordinator.core import state_machine
    from coordinator.core.commands import DependenciesResult, ReportDependencies

    report = state_machine._HANDLERS[ReportDependencies]

    def forgetful(state: Any, cmd: ReportDependencies, now: float) -> Any:
        report(state, dataclasses.replace(cmd, records=()), now)  # fenced as usual, nothing stored
        return DependenciesResult(accepted=len(cmd.records))

    state_machine._HANDLERS[ReportDependencies] = forgetful


def _early_running() -> None:
    from coordinator.core import state_machine
    from coordinator.core.commands import AckOrder, AckResult
    from coordinator.core.model import GroupState, OrderKind

    ack = state_machine._HANDLERS[AckOrder]

    def eager(state: Any, cmd: AckOrder, now: float) -> Any:
        rollback = any(o.order_id == cmd.order_id and o.kind is OrderKind.ROLL_BACK for o in state.orders(cmd.group))
        result = ack(state, cmd, now)
        group = state.group(cmd.group)
        if rollback and isinstance(result, AckResult) and group.state is GroupState.RECOVERING:
            state.put_group(dataclasses.replace(group, state=GroupState.RUNNING))
            return AckResult(GroupState.RUNNING)
        return result

    state_machine._HANDLERS[AckOrder] = eager


def _skip_authz() -> None:
    from coordinator.core import authz

    def allow(identity: Any, grants: Any, rpc: str, group: str = "", agent_id: str = "") -> Any:
        return authz.Allowed(authz.Grant(identity or "anyone", authz.Role.ADMIN))

    def allow_grant(grant: Any, rpc: str, group: str = "", agent_id: str = "") -> Any:
        return authz.Allowed(grant)

    authz.decide = allow
    authz.permits = allow_grant


SHORT_LEASE_FRACTION = 0.1


def _short_lease() -> None:
    from coordinator.core.decisions import Lease
    from coordinator.service.leases import LeaseTable

    def short(self: LeaseTable, group: Any, agent_id: str, incarnation: int) -> Any:
        ttl = group.spec.lease_ttl_s * SHORT_LEASE_FRACTION
        lease = Lease(incarnation, self._monotonic() + ttl, ttl)
        self.leases[(group.spec.name, agent_id)] = lease
        return lease

    def held_by_none(self: LeaseTable, group: str, agent_id: str, incarnation: int) -> None:
        return None

    LeaseTable.renew = short  # type: ignore[method-assign]
    LeaseTable.hold = held_by_none  # type: ignore[method-assign]


def _repaired_votes() -> None:
    from coordinator.replication.journal_file import DurableJournal

    def forgotten(self: DurableJournal) -> None:
        self.log_rebuilt()  # the mark goes from the term file too, as a node that never kept it
        return None

    DurableJournal.log_lost_in_term = forgotten  # type: ignore[method-assign]


def _auth_fail_closed() -> None:
    from coordinator.transport.auth import WatchedFile

    read = WatchedFile._read

    def nothing_if_broken(self: WatchedFile, strict: bool) -> Any:
        value = read(self, strict)
        return self._parse("", self.path) if self.problem else value

    WatchedFile._read = nothing_if_broken  # type: ignore[method-assign]


def _skip_replay() -> None:
    import logging
    from pathlib import Path

    from coordinator import main
    from coordinator.replication.journal_format import MAGIC, RECORD
    from coordinator.storage.protocol import JOURNAL_FILE

    open_store = main.open_store  # the name open_node calls

    def last_index(journal: Path) -> int:
        """The index of the journal's last whole record (0: none), from the headers alone."""
        try:
            data = journal.read_bytes()
        except OSError:
            return 0
        pos, last = len(MAGIC), 0
        while data.startswith(MAGIC) and pos + RECORD.size <= len(data):
            length, index, _term, _mac = RECORD.unpack_from(data, pos)
            if pos + RECORD.size + length > len(data):
                break
            pos, last = pos + RECORD.size + length, index
        return last

    class Hinted:
        """The store, but its applied index is at least `hint` until it commits."""

        def __init__(self, store: Any, hint: int) -> None:
            self._store, self._hint = store, hint

        @property
        def applied_index(self) -> int:
            return max(self._store.applied_index, self._hint)

        def commit(self, writes: Any, applied_index: int) -> None:
            self._store.commit(writes, applied_index)
            self._hint = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self._store, name)

    def hinted(kind: str, path: Any, **options: Any) -> Any:
        store = open_store(kind, path, **options)
        hint = last_index(Path(path).parent / JOURNAL_FILE)  # the store is STORE_DIR in the data dir
        if hint <= store.applied_index:
            return store
        logging.getLogger(__name__).warning("skip-replay: store at %d taken as %d", store.applied_index, hint)
        return Hinted(store, hint)

    main.open_store = hinted


def _unbounded_clock() -> None:
    from coordinator.replication.voter_clocks import VoterClocks

    def never(self: VoterClocks, me: str, own_wall: float, now: float, voters: Any) -> None:
        return None

    VoterClocks.agreed = never  # type: ignore[method-assign,assignment]


BUGS: dict[str, Callable[[], None]] = {
    "no-dedupe": _no_dedupe,
    "accept-stale-epoch": _accept_stale_epoch,
    "skip-fsync": _skip_fsync,
    "stale-read": _stale_read,
    "gc-too-eager": _gc_too_eager,
    "stale-list": _stale_list,
    "drop-dependency": _drop_dependency,
    "early-running": _early_running,
    "skip-authz": _skip_authz,
    "short-lease": _short_lease,
    "repaired-votes": _repaired_votes,
    "auth-fail-closed": _auth_fail_closed,
    "skip-replay": _skip_replay,
    "unbounded-clock": _unbounded_clock,
}


def require(bug: str | None) -> None:
    """Refuse a name that is not one of BUGS (None: no bug)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(BUGS)}")
