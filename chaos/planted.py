"""Deliberate bugs for coordinator nodes, to prove the chaos checker catches each.

A node runs with one through `python -m chaos.node --bug NAME coordinator ...`: the
bug is patched in before the node's main runs. A bug replaces only named seams: public
names of coordinator/ whose docstring or comment says "Chaos seam" and names the bug,
called by the code through that name (a module attribute, a class attribute, or an
entry of a table). Each bug is a list of Patch; `plant` refuses a seam that is missing
or private, so a renamed seam fails loudly instead of planting nothing, and
tests/chaos_suite/test_planted_seams.py shows each patch changes what its seam answers.
Bugs:

- `no-dedupe`: the applier ignores the request-id table, so a retried request is
  applied again (a retried Register bumps the incarnation and starts a recovery).
- `accept-stale-epoch`: fencing accepts an old incarnation (with its secret) and an
  epoch that is not open (a commit for another epoch is counted for the open one).
- `skip-fsync`: LMDB commits without sync and coordinator.fsutil's fsync (through
  which its every helper syncs) does nothing, so an acknowledgement no longer means
  durable.
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
- `restore-ignores-savepoint`: a restore to a savepoint goes to the group's newest
  consistent global checkpoint instead (a coordinated group's stable epoch, another
  group's maximum consistent cut): a consistent line, so nothing is orphaned or lost,
  but not the moment the operator named.
- `unbounded-clock`: a leader's clock is not held to its voters' clocks
  (VoterClocks never agrees on a time), so a node booted with its clock far ahead
  stamps the replicated dedupe clock with it once it leads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

NO_KEY = object()


class SeamMissing(LookupError):
    """A patch names a seam the code does not have (renamed or removed)."""


@dataclass(frozen=True)
class Patch:
    """One seam a bug replaces: `owner.attribute`, or `owner.attribute[key]` for a table.

    `wrap` gets the code's own version and returns the bug's, so a bug can call through."""

    owner: Any  # a module or a class
    attribute: str
    wrap: Callable[[Any], Any]
    key: Any = NO_KEY

    @property
    def seam(self) -> str:
        owner = (f"{self.owner.__module__}.{self.owner.__qualname__}" if isinstance(self.owner, type)
                 else self.owner.__name__)
        where = f"{owner}.{self.attribute}"
        return where if self.key is NO_KEY else f"{where}[{getattr(self.key, '__name__', self.key)}]"

    def original(self) -> Any:
        """The code's own version; raises SeamMissing unless the seam is there and public."""
        if self.attribute.startswith("_"):
            raise SeamMissing(f"{self.seam} is private: a planted bug replaces only a named, public seam")
        if self.attribute not in vars(self.owner):
            raise SeamMissing(f"{self.seam} does not exist: the seam was renamed or moved, "
                              "and this bug would plant nothing")
        found = vars(self.owner)[self.attribute]
        if self.key is NO_KEY:
            return found
        if self.key not in found:
            raise SeamMissing(f"{self.seam} does not exist: the table has no such entry")
        return found[self.key]

    def apply(self) -> Callable[[], None]:
        """Put the bug's version in place; the returned function puts the code's back."""
        original = self.original()
        if self.key is NO_KEY:
            setattr(self.owner, self.attribute, self.wrap(original))
            return lambda: setattr(self.owner, self.attribute, original)
        table = vars(self.owner)[self.attribute]
        table[self.key] = self.wrap(original)
        return lambda: table.__setitem__(self.key, original)


def _no_dedupe() -> list[Patch]:
    from coordinator.replication import applier

    return [Patch(applier, "dedupe_record", lambda recorded: lambda state, key: None)]


def _accept_stale_epoch() -> list[Patch]:
    from coordinator.core import state_machine
    from coordinator.core.commands import CommitCheckpoint, Token
    from coordinator.core.model import Mode

    def lenient_of(fenced: Callable[..., Any]) -> Callable[..., Any]:
        def lenient(state: Any, group: Any, agent_id: str, token: Token) -> Any:
            agent = state.agent(group.spec.name, agent_id)
            if agent is not None:
                # The whole fence gives way: the old incarnation's number and its secret.
                token = dataclasses.replace(token, incarnation=agent.incarnation, secret_hash=agent.secret_hash,
                                            epoch=min(token.epoch, group.current_epoch))
            return fenced(state, group, agent_id, token)
        return lenient

    def any_epoch_of(commit: Callable[..., Any]) -> Callable[..., Any]:
        def commit_any_epoch(state: Any, cmd: CommitCheckpoint, now: float) -> Any:
            group = state.group(cmd.checkpoint.group)
            if (group is not None and group.spec.mode is Mode.COORDINATED
                    and cmd.checkpoint.epoch != group.current_epoch):
                cmd = dataclasses.replace(cmd, checkpoint=dataclasses.replace(cmd.checkpoint,
                                                                              epoch=group.current_epoch))
            return commit(state, cmd, now)
        return commit_any_epoch

    return [Patch(state_machine, "fenced_agent", lenient_of),
            Patch(state_machine, "HANDLERS", any_epoch_of, CommitCheckpoint)]


def _skip_fsync() -> list[Patch]:
    from coordinator import fsutil
    from coordinator.storage import lmdb_env

    def unsynced_of(open_env: Callable[..., Any]) -> Callable[..., Any]:
        def unsynced(path: Any, **options: object) -> Any:
            if "sync" in options:
                options.update(sync=False, metasync=False)
            return open_env(path, **options)
        return unsynced

    return [Patch(fsutil, "fsync_file", lambda fsync: lambda *args, **kwargs: None),
            Patch(lmdb_env, "open_env", unsynced_of)]


def _stale_read() -> list[Patch]:
    from coordinator.replication.batcher import Batcher
    from coordinator.transport.proposer import Proposer

    async def no_barrier(self: Batcher) -> None:
        return None

    async def no_read_point(self: Proposer) -> None:
        return None  # neither the leadership check nor the barrier

    return [Patch(Batcher, "barrier", lambda barrier: no_barrier),
            Patch(Proposer, "read_point", lambda read_point: no_read_point)]


def _gc_too_eager() -> list[Patch]:
    from coordinator.core import state_machine

    def newest_only(usable: Any, deps: Any, retention: int) -> dict[str, int]:
        return {agent: max(indexes, default=0) for agent, indexes in usable.items()}

    return [Patch(state_machine, "plan_gc", lambda plan_gc: newest_only)]


STALE_LIST_LAG_S = 2.0


def _stale_list() -> list[Patch]:
    import time

    from coordinator.transport.servicers import AdminServicer

    def lagging_of(fresh: Callable[..., Any]) -> Callable[..., Any]:
        copies: dict[tuple[str, str], tuple[float, Any]] = {}

        async def lagging(self: AdminServicer, request: Any, context: Any) -> Any:
            key = (request.group, request.agent_id)
            copy = copies.get(key)
            if copy is not None and time.monotonic() - copy[0] < STALE_LIST_LAG_S:
                return copy[1]
            response = await fresh(self, request, context)
            copies[key] = (time.monotonic(), response)
            return response
        return lagging

    return [Patch(AdminServicer, "ListCheckpoints", lagging_of)]


def _drop_dependency() -> list[Patch]:
    from coordinator.core import state_machine
    from coordinator.core.commands import DependenciesResult, ReportDependencies

    def forgetful_of(report: Callable[..., Any]) -> Callable[..., Any]:
        def forgetful(state: Any, cmd: ReportDependencies, now: float) -> Any:
            report(state, dataclasses.replace(cmd, records=()), now)  # fenced as usual, nothing stored
            return DependenciesResult(accepted=len(cmd.records))
        return forgetful

    return [Patch(state_machine, "HANDLERS", forgetful_of, ReportDependencies)]


def _early_running() -> list[Patch]:
    from coordinator.core import state_machine
    from coordinator.core.commands import AckOrder, AckResult
    from coordinator.core.model import GroupState, OrderKind

    def eager_of(ack: Callable[..., Any]) -> Callable[..., Any]:
        def eager(state: Any, cmd: AckOrder, now: float) -> Any:
            rollback = any(o.order_id == cmd.order_id and o.kind is OrderKind.ROLL_BACK
                           for o in state.orders(cmd.group))
            result = ack(state, cmd, now)
            group = state.group(cmd.group)
            if rollback and isinstance(result, AckResult) and group.state is GroupState.RECOVERING:
                state.put_group(dataclasses.replace(group, state=GroupState.RUNNING))
                return AckResult(GroupState.RUNNING)
            return result
        return eager

    return [Patch(state_machine, "HANDLERS", eager_of, AckOrder)]


def _skip_authz() -> list[Patch]:
    from coordinator.core import authz

    def allow(identity: Any, grants: Any, rpc: str, group: str = "", agent_id: str = "") -> Any:
        return authz.Allowed(authz.Grant(identity or "anyone", authz.Role.ADMIN))

    def allow_grant(grant: Any, rpc: str, group: str = "", agent_id: str = "") -> Any:
        return authz.Allowed(grant)

    return [Patch(authz, "decide", lambda decide: allow), Patch(authz, "permits", lambda permits: allow_grant)]


SHORT_LEASE_FRACTION = 0.1


def _short_lease() -> list[Patch]:
    from coordinator.service.leases import LeaseTable

    def short_of(renew: Callable[..., Any]) -> Callable[..., Any]:
        def short(self: LeaseTable, group: Any, agent_id: str, incarnation: int) -> Any:
            spec = dataclasses.replace(group.spec, lease_ttl_s=group.spec.lease_ttl_s * SHORT_LEASE_FRACTION)
            return renew(self, dataclasses.replace(group, spec=spec), agent_id, incarnation)
        return short

    def held_by_none(self: LeaseTable, group: str, agent_id: str, incarnation: int) -> None:
        return None

    return [Patch(LeaseTable, "renew", short_of), Patch(LeaseTable, "hold", lambda hold: held_by_none)]


def _repaired_votes() -> list[Patch]:
    from coordinator.replication.journal_file import DurableJournal

    def forgotten(self: DurableJournal) -> None:
        self.log_rebuilt()  # the mark goes from the term file too, as a node that never kept it
        return None

    return [Patch(DurableJournal, "log_lost_in_term", lambda log_lost_in_term: forgotten)]


def _auth_fail_closed() -> list[Patch]:
    from coordinator.transport.auth import WatchedFile

    def nothing(self: WatchedFile, last_good: Any) -> Any:
        return self.parse("", self.path)

    return [Patch(WatchedFile, "unusable", lambda unusable: nothing)]


def _skip_replay() -> list[Patch]:
    import logging
    from pathlib import Path

    from coordinator import main
    from coordinator.replication.journal_format import MAGIC, RECORD
    from coordinator.storage.protocol import JOURNAL_FILE

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

    def hinted_of(open_store: Callable[..., Any]) -> Callable[..., Any]:
        def hinted(kind: str, path: Any, **options: Any) -> Any:
            store = open_store(kind, path, **options)
            hint = last_index(Path(path).parent / JOURNAL_FILE)  # the store is STORE_DIR in the data dir
            if hint <= store.applied_index:
                return store
            logging.getLogger(__name__).warning("skip-replay: store at %d taken as %d", store.applied_index, hint)
            return Hinted(store, hint)
        return hinted

    return [Patch(main, "open_store", hinted_of)]


def _unbounded_clock() -> list[Patch]:
    from coordinator.replication.voter_clocks import VoterClocks

    def never(self: VoterClocks, me: str, own_wall: float, now: float, voters: Any) -> None:
        return None

    return [Patch(VoterClocks, "agreed", lambda agreed: never)]


def _restore_ignores_savepoint() -> list[Patch]:
    from coordinator.core import restore
    from coordinator.core.model import Mode, SavedCheckpoint

    def newest_of(plan: Callable[..., Any]) -> Callable[..., Any]:
        def newest(state: Any, group: Any, savepoint: str, containing: Any) -> Any:
            if not savepoint:
                return plan(state, group, savepoint, containing)
            name = group.spec.name
            if group.spec.mode is not Mode.COORDINATED:
                return plan(state, group, "", ())  # the maximum consistent cut of the stable checkpoints
            stable = [SavedCheckpoint(a, cp.index) for a in group.members for cp in state.checkpoints(name, a)
                      if cp.stable and cp.epoch == group.stable_epoch]
            return plan(state, group, "", stable[:1]) if stable else plan(state, group, savepoint, containing)
        return newest

    return [Patch(restore, "plan", newest_of)]


BUGS: dict[str, Callable[[], list[Patch]]] = {
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
    "restore-ignores-savepoint": _restore_ignores_savepoint,
}


def require(bug: str | None) -> None:
    """Refuse a name that is not one of BUGS (None: no bug)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(BUGS)}")


def plant(bug: str, patches: list[Patch] | None = None) -> Callable[[], None]:
    """Plant `bug` (all its patches, or only `patches` of them); the returned function
    takes it out again. Nothing is planted when any of its seams is missing."""
    require(bug)
    chosen = BUGS[bug]() if patches is None else patches
    for patch in chosen:
        patch.original()
    undo = [patch.apply() for patch in chosen]

    def unplant() -> None:
        for restore in reversed(undo):
            restore()
    return unplant
