"""The replicated state machine: a pysyncobj SyncObj with one replicated method.

Entries are applied on pysyncobj's thread into an in-memory batch overlay. At the
end of every tick on the leader (every 50 ms on a follower) the batch is handed to
the store committer, which commits it durably in the background (group commit,
store_committer.py), and the proposers' callbacks run at once: Raft's rule, as etcd
keeps it. An entry is answered once a majority's journals hold it fsynced
(FlushingTransport) and it is applied where every reader of this node sees it (the
handed-over batches are read above the store). A node that stops before the store
commit replays the journal from the store's applied index when it starts again
(pysyncobj_adapter.GuardedApply skips what the store holds, unread), and a snapshot
is written only from a store the committer has caught up (_write_snapshot), so log
compaction never drops an entry the store does not hold.
"""
from __future__ import annotations

import functools
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Callable

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from coordinator import fsutil, tracing
from coordinator.config import NodeConfig
from coordinator.core.commands import Proposal, decode_result
from coordinator.core.membership import RaftView, raft_events
from coordinator.observability import raft_log
from coordinator.replication import journal_format, pysyncobj_adapter, snapshot_file, snapshots
from coordinator.replication.journal import ConflictAwareJournal
from coordinator.replication.fail_stop import (EXIT_APPLY_FAILED, EXIT_IO_ERROR, EXIT_STORE_FULL, describe,
                                               fail_stop)
from coordinator.replication.applier import apply_entry_bytes
from coordinator.replication.migration import refuse_old_formats
from coordinator.replication.pending_proposals import PendingProposals
from coordinator.replication.read_index import LEADER_CHANGED, NOT_LEADER, ReadDone, ReadRounds
from coordinator.replication.replica import (BatchTrace, Callback, ChangeListener, ExportedSnapshot,
                                             MembershipOutcome, NodeStatus, NotLeader, Overloaded)
from coordinator.replication.snapshots import SnapshotInfo
from coordinator.replication.store_committer import StoreCommitter
from coordinator.replication.tick_lag import TickLag
from coordinator.replication.leader_clock import LeaderClock
from coordinator.replication.voter_clocks import VoterClocks
from coordinator.storage.protocol import (EXIT_DAMAGED, JOURNAL_FILE, REBUILD_FROM_PEERS, SNAPSHOT_FILE,
                                          DamagedAtRest, Store, StoreFullError, StoreIOError)
from coordinator.storage import keys
from coordinator.storage.state import RESULT, DecodeMemo, KvState, RecordCache, Writes, agent_changes

log = logging.getLogger(__name__)

# Refuse new proposals when the store is this full: a committed entry that cannot
# be stored would force the node down, so the space is reserved for the log's tail.
ADMISSION_LIMIT = 0.9
CAPACITY_CHECK_PERIOD_S = 0.1
FOLLOWER_COMMIT_PERIOD_S = 0.05
FOLLOWER_COMMIT_KEYS = 5000
# A tick that starts this long after the previous one (in raft_min_timeout) means the
# Raft thread itself was stalled (the interpreter was busy, the machine overloaded).
STALLED_TICK = 0.5
# A snapshot asked for a backup: how often to look for it, and to ask again (a tick
# that found no new entry to cover writes none).
SNAPSHOT_POLL_S = 0.02
SNAPSHOT_FORCE_AGAIN_S = 1.0


class StateGap(DamagedAtRest):
    """The node's own files cannot rebuild its state: entries between the store and the journal are gone."""


def _refuse_a_gap(journal_first: int | None, store_applied: int, snapshot: SnapshotInfo | None) -> None:
    """Raise StateGap when the journal starts after an entry that neither the store nor the
    snapshot holds (a lost store without its snapshot): started so, the node would apply
    the journal to an empty state and serve, or lead, a state that never existed. The
    snapshot covers the log up to its last entry, which may lie past the store index it
    holds: the entries after that one changed no state (SnapshotInfo.last_log_index)."""
    covered = store_applied if snapshot is None else max(store_applied, snapshot.applied_index,
                                                          snapshot.last_log_index)
    if journal_first is not None and journal_first > covered + 1:
        held = "no readable snapshot" if snapshot is None else f"a snapshot up to {snapshot.applied_index}"
        raise StateGap(f"the journal starts at index {journal_first}, but the store holds entries up to "
                       f"{store_applied} and there is {held}: entries in between are gone. {REBUILD_FROM_PEERS}")


class CoordinatorNode(pysyncobj_adapter.GuardedApply, pysyncobj_adapter.LeaderWritePath,
                      pysyncobj_adapter.OneMembershipChangeAtATime, pysyncobj_adapter.SnapshotReceiver, SyncObj):
    def __init__(self, config: NodeConfig, store: Store, *, on_apply: Callable[[float], None] | None = None,
                 on_journal_flush: Callable[[float], None] | None = None,
                 raft_bind_address: str | None = None) -> None:
        pysyncobj_adapter.install()  # first: refuses an unsupported pysyncobj before anything is touched
        refuse_old_formats(Path(config.data_dir))  # before anything in the data dir is read
        self.config = config
        self._store = store
        self._committer = StoreCommitter(store, self._store_failed)
        self._records = RecordCache(store, layers=self._unstored)
        self._read_memo = DecodeMemo()  # for readers on other threads (the event loop's heartbeats)
        self._batch_index = store.applied_index
        self._to_answer: list[Callable[[], None]] = []
        self._apply_started = 0.0  # time.perf_counter() when the last entry began to be applied
        self._spans_to_store: list[tracing.SpanRef] = []  # of traced proposals applied since the last hand-over
        self._change_listener: ChangeListener | None = None
        self._snapshot_to_sync = False
        self._on_apply = on_apply
        self._pending = PendingProposals()
        self._capacity_checked_at = float("-inf")
        self._last_commit = float("-inf")
        self._full = False
        self._usage = ""
        self._state_lock = threading.Lock()  # guards store swaps against readers on other threads
        self.tick_lag = TickLag(config.auto_tick_period)
        self._tick_started: float | None = None
        self._deferred_at = float("-inf")
        self._replaced_applied_from: int | None = None
        self.read_rounds = ReadRounds()  # Raft thread only; the transport stamps and counts with it
        # This node's clock as it stamps its answers to a leader (Raft thread only), and
        # the voters' clocks as a leader hears them (voter_clocks).
        self.answer_clock = LeaderClock()
        self.voter_clocks = VoterClocks()
        self._reads_arriving: queue.SimpleQueue[ReadDone] = queue.SimpleQueue()
        data = Path(config.data_dir)
        fsutil.ensure_dir(data)  # the journal and term file in it survive a power loss
        self.snapshot_path = str(data / SNAPSHOT_FILE)
        self.last_snapshot: SnapshotInfo | None = snapshots.existing(self.snapshot_path)
        journal_path = str(data / JOURNAL_FILE)
        _refuse_a_gap(journal_format.first_index(journal_path), store.applied_index, self.last_snapshot)
        self._key = journal_format.record_key(config.password())  # journal records' and snapshots' MACs
        pysyncobj_adapter.use_journal_key(journal_path, self._key)
        # Read by the transport pysyncobj builds in the constructor below.
        self.raft_port_limits = pysyncobj_adapter.RaftPortLimits(
            auth_timeout_s=config.raft_auth_timeout_s,
            unauthenticated_max_bytes=config.raft_unauthenticated_max_bytes,
            unauthenticated_per_source=config.raft_unauthenticated_per_source,
            on_refused=raft_log.connection_refused)
        self._view: RaftView | None = None
        self._voters: tuple[frozenset[str], frozenset[str]] = (frozenset({config.raft_address}),
                                                               frozenset({config.raft_address}))
        conf = SyncObjConf(
            password=config.password(),
            # Listen on our own address only (the pod IP on Kubernetes), never 0.0.0.0:
            # the Raft port speaks pickle. Given resolved (service.ports), so that
            # pysyncobj never resolves our own name: a failed lookup there is a TypeError.
            bindAddress=raft_bind_address or config.raft_address,
            autoTick=True,
            autoTickPeriod=config.auto_tick_period,
            appendEntriesUseBatch=config.append_entries_batch,
            appendEntriesPeriod=config.append_entries_period,
            raftMinTimeout=config.raft_min_timeout,
            raftMaxTimeout=config.raft_max_timeout,
            connectionTimeout=max(3.5, config.raft_max_timeout),
            # Only one side of each pair dials; with the 5 s default a restarted node can
            # wait 5 s before the peer redials it. Retrying each election timeout is cheap.
            connectionRetryTime=config.raft_min_timeout,
            leaderFallbackTimeout=config.leader_fallback_timeout,
            dnsCacheTime=config.dns_cache_time,
            dnsFailCacheTime=min(1.0, config.dns_cache_time),
            journalFile=journal_path,
            fullDumpFile=self.snapshot_path,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            useFork=False,
            logCompactionMinEntries=config.compaction_min_entries,
            logCompactionMinTime=config.compaction_min_time,
            dynamicMembershipChange=config.dynamic_membership,
        )
        super().__init__(config.raft_address, [p.raft for p in config.peer_list()], conf,
                         transportClass=pysyncobj_adapter.FlushingTransport)
        self._journal.on_flush = on_journal_flush
        self._journal.on_conflict = self._on_log_conflict
        self.addOnTickCallback(self._end_of_tick)

    @property
    def _journal(self) -> ConflictAwareJournal:
        return pysyncobj_adapter.raft_log(self)

    # ---- the one replicated method ------------------------------------------------
    @replicated
    def apply_entry(self, data: bytes) -> bytes | list[bytes] | None:
        """Called for entries past `_applied_through` only (GuardedApply skips the rest)."""
        index = pysyncobj_adapter.applying_index(self)
        decoded = self._pending.take_decoded(data)
        started = self._apply_started = time.perf_counter()
        result = apply_entry_bytes(self._records, data, decoded)
        self._batch_index = index
        if self._on_apply is not None:
            self._on_apply(time.perf_counter() - started)
        return result

    def _applied_through(self) -> int:
        """The last entry applied: in the store, or in the batch handed to it."""
        return self._batch_index

    def _apply_failed(self, index: int, exc: Exception) -> None:
        fail_stop(f"log entry {index} could not be applied: {describe(exc)}. The entry is committed, so every node "
                  "that applies it stops the same way: a bug in the state machine; keep the data dirs for its report",
                  EXIT_APPLY_FAILED)

    # ---- a stalled node does not call an election ---------------------------------
    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj checks the election timer before it reads the messages waiting on
        its sockets. A node whose own Raft thread was stalled past the timeout (its
        process starved of the interpreter or of the CPU) would call an election with
        the leader's heartbeats still unread; under client load that deposed healthy
        leaders. After such a stall the timer is held for one minimum timeout, in which
        this tick reads what the leader sent (and that resets the timer as usual)."""
        now = time.monotonic()
        stalled = self._tick_started is not None and now - self._tick_started > STALLED_TICK * self.config.raft_min_timeout
        # At most once per maximum timeout: a node stalled at every tick (a dead leader,
        # a machine overloaded for good) must still get to call its election.
        if stalled and now >= self._deferred_at + self.config.raft_max_timeout:
            pysyncobj_adapter.defer_election(self, now + self.config.raft_min_timeout)
            self._deferred_at = now
        if self._journal.log_lost_in_term() is not None:  # pysyncobj_adapter.RebuildingVoter
            pysyncobj_adapter.defer_election(self, now + self.config.raft_max_timeout, even_a_transfer=True)
        self._tick_started = now
        # The leader counts its own log toward the majority early in the tick; its
        # AppendEntries left unflushed (FlushingTransport), and the end of the last
        # tick flushed them, unless that tick ended in an exception.
        self._journal.flush()
        super()._onTick(timeToWait)

    # ---- AppendEntries coalescing ---------------------------------------------------
    def _checkCommandsToApply(self) -> None:
        """Send one AppendEntries per follower for all commands queued this tick.

        With appendEntriesUseBatch=False, pysyncobj sends a (pickled, encrypted)
        AppendEntries to every follower for *each* queued command; under load that
        was the leader's largest CPU cost. Holding them back while the queue drains,
        then sending once, keeps the low latency of unbatched mode (nothing waits for
        appendEntriesPeriod) with one message per follower per tick.
        """
        if self.conf.appendEntriesUseBatch:
            super()._checkCommandsToApply()
            return
        with pysyncobj_adapter.one_append_entries(self):
            super()._checkCommandsToApply()

    # ---- group commit -------------------------------------------------------------
    def _unstored(self) -> tuple[Writes, ...]:
        return self._committer.layers

    def _hand_over_store_batch(self) -> None:
        """Hand what was applied, a store batch, to the store committer; readers see it from now on."""
        if self._batch_index <= self._committer.handed_index and not self._records.pending:
            return
        # The entries applied here are committed, so a majority holds them durably;
        # flushing our own copy first keeps the journal at least as far as the store's
        # applied_index, which a restart relies on (it skips entries up to it). In a
        # one-node cluster nothing else flushes before the acknowledgement.
        self._journal.flush()
        listener = self._change_listener
        changes = agent_changes(self._records.pending) if listener is not None else None
        spans: tuple[tracing.SpanRef, ...] = ()
        if self._spans_to_store:
            spans, self._spans_to_store = tuple(self._spans_to_store), []
        self._committer.hand_over(self._batch_index, self._records.hand_off(), spans)
        if listener is not None and changes:
            listener(changes)  # after the hand-over: a woken stream reads what changed

    def _store_failed(self, exc: Exception) -> None:
        """On the committer's thread: the entries are committed in Raft; a replica that
        cannot store them must stop rather than diverge. It replays them from the
        journal after its restart."""
        code = EXIT_STORE_FULL if isinstance(exc, StoreFullError) else EXIT_IO_ERROR
        if not isinstance(exc, (StoreFullError, StoreIOError)):
            log.error("the store commit failed unexpectedly", exc_info=exc)
        fail_stop(f"cannot store committed entries: {exc}", code)

    def _store_caught_up(self) -> None:
        """Everything applied is in the store: before a snapshot is written or installed."""
        self._hand_over_store_batch()
        self._committer.drain()

    def _end_of_tick(self) -> None:
        self.tick_lag.tick()
        raft_log.tick()
        # What this tick appended and sent to followers unflushed becomes durable while
        # they store it too (before the poll that waits for their answers).
        self._journal.flush()
        # The leader hands its batch over every tick: replies and readers wait for it.
        # A follower answers no one, so it hands over less often (fewer store commits
        # competing with its Raft thread); what it applied but did not store is replayed
        # from the journal after a crash.
        now = time.monotonic()
        if (self._to_answer or self._isLeader() or now >= self._last_commit + FOLLOWER_COMMIT_PERIOD_S
                or len(self._records.pending) >= FOLLOWER_COMMIT_KEYS):
            self._hand_over_and_answer()
        self._serve_reads()
        if self._snapshot_to_sync:
            fsutil.fsync_dir(Path(self.snapshot_path).parent)  # make pysyncobj's rename durable
            self._snapshot_to_sync = False
        self._pending.track_leadership(self._isLeader())
        self._observe_raft()

    def _hand_over_and_answer(self) -> None:
        """Hand what was applied to the store committer and answer the proposals it
        settles: committed in Raft, and visible to this node's readers."""
        self._hand_over_store_batch()
        self._last_commit = time.monotonic()
        callbacks, self._to_answer = self._to_answer, []
        _answer_each(callbacks, "a proposal")

    def _after_apply(self) -> None:
        """Called by pysyncobj_adapter.LeaderWritePath once committed entries are applied:
        the leader hands them over and answers their proposals at once."""
        if self._isLeader():
            self._hand_over_and_answer()

    def _on_log_conflict(self, index: int) -> None:
        """A leader's entry replaced this node's at `index`. Entries this node applied
        were committed as far as it knew: replacing one means two histories were
        committed, and the state holds the one the cluster dropped."""
        if index <= self._batch_index and (self._replaced_applied_from is None or index < self._replaced_applied_from):
            self._replaced_applied_from = index
            log.error("the leader replaced entries from index %d that this node had applied (up to %d): its "
                      "history diverged from the cluster's", index, self._batch_index)

    def replaced_applied_from(self) -> int | None:
        """The first applied entry a leader's log replaced since the start (None: none):
        this node's state then holds a history the cluster's does not."""
        return self._replaced_applied_from

    # ---- Raft events ----------------------------------------------------------------
    def _observe_raft(self) -> None:
        """Log and count what changed in Raft since the last tick (elections, terms,
        members), and keep the voters for membership checks off the Raft thread."""
        self._voters = pysyncobj_adapter.voters(self)
        leader = self._getLeader()
        view = RaftView(role=pysyncobj_adapter.raft_role(self), term=self.raftCurrentTerm,
                        leader=leader.address if leader is not None else "", voters=self._voters[0])
        if self._view is not None and view != self._view:
            for event in raft_events(self._view, view):
                raft_log.record(event, node=self.config.raft_address)
        self._view = view
        raft_log.flush()

    def voters(self) -> tuple[frozenset[str], frozenset[str]]:
        """(every voter, the voters this node hears from), this node included, as of
        the last tick: the leader's view is what a membership check needs."""
        return self._voters

    def probe_member(self, raft_address: str, timeout: float) -> None:
        """Raise replica.RaftProbeFailed unless `raft_address` answers with
        this cluster's Raft password. Blocking."""
        pysyncobj_adapter.probe_password(self, raft_address, timeout)

    def change_membership(self, raft_address: str, *, add: bool,
                          callback: Callable[[MembershipOutcome, str], None]) -> None:
        """Propose adding or removing one voter; callback(outcome, pysyncobj's reason) once decided."""
        def decided(result: object, error: int) -> None:
            callback(_membership_outcome(error), _FAIL_NAMES.get(error, str(error)))
        (self.addNodeToCluster if add else self.removeNodeFromCluster)(raft_address, callback=decided)

    # ---- proposing ----------------------------------------------------------------
    def leader_raft_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else leader.address

    def is_leader(self) -> bool:
        return self._isLeader()

    def agreed_time(self, own: float) -> float | None:
        """On the leader, the wall-clock time a majority of the voters' clocks have
        reached, `own` being this node's reading (voter_clocks); None on a follower,
        or while fewer than a majority have answered lately."""
        if not self._isLeader():
            return None
        return self.voter_clocks.agreed(self.config.raft_address, own, time.monotonic(), self._voters[0])

    def tick_lag_since(self, since: float) -> float:
        return self.tick_lag.worst_since(since)

    def propose(self, data: bytes, callback: Callback, decoded: Proposal | None = None,
                trace: BatchTrace | None = None) -> None:
        """Propose an encoded LogEntry; callback(result, None) once it is committed (on a
        majority's journal) and applied, or (None, reason)."""
        if not self._isLeader():
            raise NotLeader(self.leader_raft_address())
        self._check_capacity()
        number = self._pending.add(data, decoded, lambda reason: callback(None, reason))

        def on_result(result: bytes | list[bytes] | None, error: int) -> None:
            """Called by pysyncobj right after it applied the entry, in the same tick."""
            if not self._pending.settle(number):
                return  # already answered "outcome unknown" when this node lost the lead
            if error == FAIL_REASON.SUCCESS:
                if trace is not None:  # the apply began this long ago, as apply_entry timed it
                    trace.committed_ns = time.time_ns() - int((time.perf_counter() - self._apply_started) * 1e9)
                    self._spans_to_store.extend(trace.spans)
                self._to_answer.append(lambda: callback(result, None))
            else:
                self._pending.forget_decoded(data)
                callback(None, _FAIL_NAMES.get(error, str(error)))

        self.apply_entry(data, callback=on_result)

    def _check_capacity(self) -> None:
        now = time.monotonic()
        if now >= self._capacity_checked_at + CAPACITY_CHECK_PERIOD_S:
            self._capacity_checked_at = now
            stats = self._store.stats()
            self._full = bool(stats.get("capacity_bytes")) and stats["used_bytes"] > ADMISSION_LIMIT * stats["capacity_bytes"]
            self._usage = f"store {stats['used_bytes']} of {stats['capacity_bytes']} bytes used"
        if self._full:
            raise Overloaded(self._usage)

    # ---- ReadIndex (read_index.py) -------------------------------------------------
    def read_index(self, done: ReadDone) -> None:
        """Ask for a linearizable read point: done(None) once this leader has confirmed
        its lead with a majority after this call and applied everything committed
        before it; done(reason) when it cannot. Raises NotLeader at once on a follower.
        Any thread; `done` runs on the Raft thread."""
        if not self._isLeader():
            raise NotLeader(self.leader_raft_address())
        self._reads_arriving.put(done)
        pysyncobj_adapter.wake(self)

    def _serve_reads(self) -> None:
        """At the end of every tick: start a round for the reads that arrived, and
        answer those a majority confirmed and this node's readers see applied."""
        rounds, leader, term = self.read_rounds, self._isLeader(), self.raftCurrentTerm
        if len(rounds) and (not leader or term != rounds.term):
            self._tell(rounds.abandon(), LEADER_CHANGED)
        arrived: list[ReadDone] = []
        while not self._reads_arriving.empty():
            arrived.append(self._reads_arriving.get_nowait())
        if arrived and not leader:
            self._tell(arrived, NOT_LEADER)
        elif arrived:
            rounds.begin(term, pysyncobj_adapter.read_index(self), arrived)
            pysyncobj_adapter.send_append_entries_now(self)  # stamped with the new round
        if len(rounds):
            followers = pysyncobj_adapter.voters(self)[0] - {self.config.raft_address}
            self._tell(rounds.ready(followers, self._readable_through()), None)

    def store_holds_applied(self) -> bool:
        """Whether the store holds every entry applied so far (the background commit
        has caught up); any thread."""
        return self._store.applied_index >= self._batch_index

    def _readable_through(self) -> int:
        """The last log index whose effect this node's readers see. Once the applied
        batch is handed over that is Raft's applied index: the entries after the last
        one applied here (a leader's no-op, a membership change) change no state."""
        if self._records.pending or self._batch_index > self._committer.handed_index:
            return self._committer.handed_index
        return self.raftLastApplied

    @staticmethod
    def _tell(reads: list[ReadDone], outcome: str | None) -> None:
        _answer_each([functools.partial(done, outcome) for done in reads], "a read")

    # ---- reads (callers must have passed a read point for linearizability) ---------
    def read_state(self) -> KvState:
        layers = self._committer.layers  # taken before any store read (store_committer)
        return KvState(RecordCache(self._store, self._read_memo, layers=lambda: layers))

    def on_agent_changes(self, listener: ChangeListener | None) -> None:
        self._change_listener = listener

    def digest(self) -> str:
        """Everything replicated, dedupe records included: equal on converged replicas."""
        return self.digest_with_index()[1]

    def digest_with_index(self) -> tuple[int, str]:
        """(applied index, digest()) of one stored state: comparable across replicas."""
        with self._state_lock:
            return self._store.digest_with_index()

    def state_digest(self) -> str:
        """The domain state only: unchanged by a rejected command (which still records its answer)."""
        with self._state_lock:
            return self._store.digest(skip=keys.prefix(RESULT))

    @property
    def store(self) -> Store:
        return self._store

    # ---- snapshots ----------------------------------------------------------------
    def _write_snapshot(self, tmp_path: str, raft_data: tuple) -> None:
        self._store_caught_up()
        self.last_snapshot = snapshots.write(tmp_path, raft_data, self._store, self._key)
        self._snapshot_to_sync = True

    def snapshot_covering(self, raft_index: int, timeout_s: float) -> ExportedSnapshot:
        """replica.SnapshotSource: the node's own snapshot when it reaches `raft_index`;
        else one is written at the next tick (a forced log compaction, asked again
        every second), exactly as the node writes its own."""
        deadline = time.monotonic() + timeout_s
        forced_at = float("-inf")
        while (found := snapshots.open_covering(self.snapshot_path, raft_index)) is None:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"no snapshot reached index {raft_index} within {timeout_s:.0f} s")
            if now - forced_at >= SNAPSHOT_FORCE_AGAIN_S:
                self.forceLogCompaction()
                forced_at = now
            time.sleep(SNAPSHOT_POLL_S)
        return found

    def _snapshot_last_entry(self, path: str) -> tuple[int, int]:
        return snapshots.last_entry(path)

    def _read_snapshot(self, path: str) -> tuple:
        self._store_caught_up()
        try:
            return self._install_snapshot(path)
        except (DamagedAtRest, snapshot_file.SnapshotFormatError) as exc:
            # pysyncobj would log and carry on without the state; it has already
            # renamed the file over ours, so keep it for inspection and stop.
            aside = path + ".damaged"
            os.replace(path, aside)
            fail_stop(f"{exc}; the file was moved to {aside}. {REBUILD_FROM_PEERS}", EXIT_DAMAGED)

    def _install_snapshot(self, path: str) -> tuple:
        """Load the snapshot's store image unless the store already holds its index.

        A store at or past the snapshot's index is kept, and pysyncobj's replay of the
        entries up to the store's index is skipped (GuardedApply): right because this
        node applies committed entries only (pysyncobj_adapter.commit_only_what_the_leader_sent),
        which are the same entries on every node."""
        with snapshots.open_received(path, self.config.raft_address, self._key) as received:
            last, previous, _members = received.raft_data
            self._journal.align_to_snapshot(previous, last)
            applied_index = received.header.applied_index
            if applied_index > self._store.applied_index:
                log.info("restoring store from snapshot at index %d (local %d)", applied_index, self._store.applied_index)
                with self._state_lock:
                    self._store.load_image(received.image, received.header.image_len)
                self._records.reset()
                self._batch_index = self._store.applied_index
                self._committer.reset(self._batch_index)
                if self._change_listener is not None:
                    self._change_listener(None)
        self.last_snapshot = SnapshotInfo.of(path, applied_index)
        return received.raft_data

    # ---- status -------------------------------------------------------------------
    def status(self) -> NodeStatus:
        raw = self.getStatus()
        state = {0: "follower", 1: "candidate", 2: "leader"}.get(raw.get("state"), str(raw.get("state")))
        leader = raw.get("leader")
        snapshot = self.last_snapshot
        return NodeStatus(
            node=self.config.raft_address,
            role=state,
            term=raw.get("raft_term", 0),
            commit_index=raw.get("commit_idx", 0),
            applied_index=self._store.applied_index,
            raft_applied_index=raw.get("last_applied", 0),
            log_entries=raw.get("log_len", 0),
            leader=getattr(leader, "address", "") if leader else "",
            has_quorum=bool(raw.get("has_quorum")),
            last_snapshot_index=snapshot.applied_index if snapshot else 0,
            last_snapshot_age_s=(time.monotonic() - snapshot.at_monotonic) if snapshot else -1.0,
            last_snapshot_bytes=snapshot.size if snapshot else 0,
            voters=len(self._voters[0]),
            live_voters=len(self._voters[1]),
            tick_lag_s=self.tick_lag.recent(),
        )

    def close(self) -> None:
        self.destroy_synchronous()
        self._committer.close()
        self._store.close()


def _membership_outcome(error: int) -> MembershipOutcome:
    """pysyncobj's reasons, as a membership change's outcome: MISSING_LEADER, DISCARDED
    (another leader's entry took the index) and NOT_LEADER all mean the change was never
    applied, so the caller may propose it again on the leader."""
    if error == FAIL_REASON.SUCCESS:
        return MembershipOutcome.APPLIED
    if error in (FAIL_REASON.MISSING_LEADER, FAIL_REASON.DISCARDED, FAIL_REASON.NOT_LEADER):
        return MembershipOutcome.NOT_APPLIED
    if error in (FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME):
        return MembershipOutcome.UNKNOWN
    return MembershipOutcome.REFUSED


_FAIL_NAMES = {
    FAIL_REASON.SUCCESS: "SUCCESS",
    FAIL_REASON.QUEUE_FULL: "QUEUE_FULL",
    FAIL_REASON.MISSING_LEADER: "MISSING_LEADER",
    FAIL_REASON.DISCARDED: "DISCARDED",
    FAIL_REASON.NOT_LEADER: "NOT_LEADER",
    FAIL_REASON.LEADER_CHANGED: "LEADER_CHANGED",
    FAIL_REASON.REQUEST_DENIED: "REQUEST_DENIED",
    FAIL_REASON.UNKNOWN_OUTCOME: "UNKNOWN_OUTCOME",
}

__all__ = ["CoordinatorNode", "NotLeader", "Overloaded", "decode_result"]


def _answer_each(answers: list[Callable[[], None]], what: str) -> None:
    """Call every answer: one caller's failure (its event loop gone) must not cost the
    others theirs."""
    for answer in answers:
        try:
            answer()
        except Exception:
            log.exception("answering %s failed", what)
