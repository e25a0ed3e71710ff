"""Where LangGraph threads live: one raftpoint agent per thread, its head in checkpoints.

Each thread is an agent of the saver's group (mode uncoordinated: threads do not
message each other). A saver that writes a thread first registers as it, which makes
it the thread's one writer: the coordinator gives it a new incarnation and refuses
every later commit of the previous one. That is the fence LangGraph's own savers
lack (a stale second writer forks the thread's chain without anyone noticing); here
the stale writer gets ThreadFenced and writes nothing.

Every change to a thread commits its head (thread_history.py: the newest checkpoints
and a pointer to the sealed rest) as a new checkpoint of its agent; the coordinator's
record of the agent's latest checkpoint is the thread's head. Reading a thread this
saver does not write fetches that head; reading one it writes uses its own copy, which
is the head as long as it is not fenced. Changes to one thread take turns, and those
that queue up while its head is being committed are committed together (`change`);
different threads proceed side by side.

A thread's blobs are in the blob store of the saver that wrote it. A thread whose head
this saver cannot read (missing, damaged, or in another saver's store) raises
ThreadUnreadable when it is asked for by id, and is left out, with one warning, when
the group's threads are walked: one broken thread does not break the others. Deleting
a thread does not read its head, so a broken thread can be deleted and started anew.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator

from agent_client.blobstore import BlobStore
from agent_client.connection import Connection, Rejected
from agent_client.delivery_log import DeliveryLog
from agent_client.effects import ProtocolOperation, drive, perform_blocking
from agent_client.langgraph.group_commit import GroupCommit
from agent_client.langgraph.thread_history import SEAL_AFTER, ThreadHead
from agent_client.protocol import AgentProtocol
from agent_client.restored import RestoreKind
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.validation import SPEC_SECONDS

# Threads have no process to heartbeat: the longest lease the coordinator grants, and a
# write after it lapsed registers the thread again (_commit).
THREAD_LEASE_S = SPEC_SECONDS["lease_ttl_s"][1]
REFUSED_AS_STALE = (pb.REASON_STALE_INCARNATION,)
REFUSED_UNTIL_REGISTERED = (pb.REASON_AGENT_NOT_ALIVE,)
# What a commit's state holds besides the head: the checkpoint's framing and the
# protocol's own fields (about 150 bytes for a thread, which sends no messages).
COMMIT_FRAMING_BYTES = 256

log = logging.getLogger("agent_client")


class ThreadFenced(RuntimeError):
    """Another writer took this thread over: this saver's writes to it are refused."""


class ThreadUnreadable(RuntimeError):
    """A blob of the thread (its head, a sealed segment, a value) is missing or damaged
    in this saver's blob store, or was written to another store. delete_thread still
    works, and is how the thread is started anew."""

    def __init__(self, agent_id: str, message: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id  # the thread's agent: what names it when its head (holding its id) is unreadable


def thread_agent_id(thread_id: str) -> str:
    """A valid, collision-free agent id for any thread id (thread ids are free text)."""
    return "lg-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


@dataclass
class Owned:
    protocol: AgentProtocol
    head: ThreadHead


class ThreadStore:
    """The threads of one group, through one connection; safe to share between threads."""

    def __init__(self, conn: Connection, group: str, blobs: BlobStore, *, seal_after: int = SEAL_AFTER) -> None:
        self.conn, self.group, self.blobs, self.seal_after = conn, group, blobs, seal_after
        # The largest head that travels inside its commit instead of as a blob (0: none
        # does, as with a store that encrypts or keeps no state inline).
        self.inline_head_bytes = max(0, getattr(blobs, "inline_max_bytes", 0) - COMMIT_FRAMING_BYTES)
        self._owned: dict[str, Owned] = {}
        self._fenced: dict[str, str] = {}  # thread -> why: a fenced saver never takes a thread back by itself
        self._lock = threading.Lock()  # guards the dicts above, never held across a call
        self._pending: dict[str, GroupCommit[ThreadHead]] = {}  # thread -> its changes not yet committed
        self._group_lock = threading.Lock()
        self._group_ready = False
        self._skipped: set[str] = set()  # agents of the threads warned about, guarded by _lock

    def change(self, thread_id: str, edit: Callable[[ThreadHead], ThreadHead | None], *,
               read_head: bool = True) -> None:
        """Apply `edit` to the thread's newest head and return once a commit holding the
        result is acknowledged; changes that queue up while a commit is in flight go out
        together (group_commit.py). Becomes the thread's writer first (`_owner`; without
        `read_head`, from an empty head, not reading the old one). `edit` returns a new
        head (never changing its argument) or None for no change. Other threads are not
        held up."""
        with self._lock:
            pending = self._pending.setdefault(thread_id, GroupCommit())
        pending.change(lambda: self._owner(thread_id, read_head=read_head).head, edit, partial(self.commit, thread_id))

    def unacknowledged(self, thread_id: str) -> int:
        """Changes to the thread that no commit acknowledged yet (each one's caller is waiting)."""
        with self._lock:
            pending = self._pending.get(thread_id)
        return 0 if pending is None else pending.unacknowledged

    # ---- effects -------------------------------------------------------------------------
    def _drive(self, op: ProtocolOperation[Any]) -> Any:
        return drive(op, partial(perform_blocking, self.conn))

    def _protocol(self, agent_id: str) -> AgentProtocol:
        return AgentProtocol(self.group, agent_id, blobs=self.blobs, deliveries=DeliveryLog(None),
                             snapshot=lambda: None)

    def ensure_group(self) -> None:
        with self._group_lock:
            if not self._group_ready:
                self._create_group()

    def _create_group(self) -> None:
        self.conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"create-{self.group}-{uuid.uuid4().hex[:16]}",
            spec=pb.GroupSpec(group=self.group, mode=pb.UNCOORDINATED, lease_ttl_s=THREAD_LEASE_S, retention=0)))
        self._group_ready = True

    # ---- reads ---------------------------------------------------------------------------
    def read(self, thread_id: str) -> ThreadHead | None:
        """The thread's head: this saver's own copy if it writes the thread, else the committed one."""
        with self._lock:
            owned = self._owned.get(thread_id)
            if owned is not None:
                return owned.head
        return self._head(thread_agent_id(thread_id), thread_id)

    def _head(self, agent_id: str, thread_id: str | None = None) -> ThreadHead | None:
        """The head in the agent's latest checkpoint, or None if it has none."""
        meta = self._latest(agent_id)
        return None if meta is None else self._load(self._protocol(agent_id), meta, thread_id)

    def _latest(self, agent_id: str) -> pb.CheckpointMeta | None:
        self.ensure_group()
        try:
            metas = list(self._paged("ListCheckpoints", pb.ListCheckpointsRequest(group=self.group, agent_id=agent_id),
                                     "checkpoints"))
        except Rejected as exc:
            if exc.reason_code == pb.REASON_AGENT_NOT_FOUND:
                return None
            raise
        return max(metas, key=lambda m: m.index) if metas else None

    def _paged(self, method: str, request: Any, field: str) -> Iterator[Any]:
        """Every item of a paged AdminService answer: a thread's heads (until raftpoint gc
        releases the superseded ones) and a group's threads can each pass one page."""
        while True:
            resp = self.conn.call("AdminService", method, request)
            yield from getattr(resp, field)
            if not resp.next_page_token:
                return
            request.page_token = resp.next_page_token

    def _load(self, protocol: AgentProtocol, meta: pb.CheckpointMeta | None, thread_id: str | None) -> ThreadHead | None:
        """Restore `meta` (None: where Register said to resume); a new thread starts empty.
        `thread_id`, when the caller knows it, names the thread in errors."""
        restored = self._drive(protocol.restore(meta))
        if restored.kind is RestoreKind.REJECTED:
            who = f"thread {thread_id!r}" if thread_id is not None else f"the thread of agent {protocol.agent_id}"
            raise ThreadUnreadable(protocol.agent_id, f"{who}: its head cannot be read from this saver's blob store "
                                   f"(delete_thread starts it anew): {restored.reason}")
        if restored.state is None:
            return None if thread_id is None else ThreadHead(thread_id, seal_after=self.seal_after)
        return ThreadHead.from_json(restored.state, seal_after=self.seal_after)

    def heads(self) -> Iterator[ThreadHead]:
        """The head of every thread of the group that holds one; a thread whose head
        cannot be read is skipped (`skip`)."""
        self.ensure_group()
        agents = list(self._paged("GetGroup", pb.GetGroupRequest(group=self.group), "agents"))
        with self._lock:
            mine = {o.protocol.agent_id: o.head for o in self._owned.values()}
        for agent in agents:
            if agent.agent_id in mine:
                yield mine[agent.agent_id]
                continue
            try:
                head = self._head(agent.agent_id)
            except ThreadUnreadable as exc:
                self.skip(exc)
                continue
            if head is not None:
                yield head

    def skip(self, why: ThreadUnreadable) -> None:
        """Log that a walk over the group's threads leaves one out, once per thread per
        saver: savers of one group with different blob stores see each other's threads
        on every walk, each time with a newer head."""
        with self._lock:
            first = why.agent_id not in self._skipped
            self._skipped.add(why.agent_id)
        if first:
            log.warning("skipping a LangGraph thread of group %s: %s", self.group, why)

    # ---- writes --------------------------------------------------------------------------
    def clear(self, thread_id: str) -> None:
        """Commit an empty head for a thread that has one, without reading the old head:
        deleting is what a thread this saver cannot read still allows."""
        with self._lock:
            owned = thread_id in self._owned
        if not owned:
            latest = self._latest(thread_agent_id(thread_id))
            if latest is None:
                return
            if not _in_store(self.blobs, latest.blob_uri):
                log.warning("deleting LangGraph thread %r of group %s: its blobs are in another blob store (%s); "
                            "they go when raftpoint gc runs against that store", thread_id, self.group,
                            latest.blob_uri)
        self.change(thread_id, lambda _: ThreadHead(thread_id, seal_after=self.seal_after), read_head=False)

    def _owner(self, thread_id: str, *, read_head: bool = True) -> Owned:
        with self._lock:
            self._check_not_fenced(thread_id)
            owned = self._owned.get(thread_id)
        if owned is None:
            if read_head:
                # Read it before registering: a thread this saver cannot read is refused
                # without fencing off the saver that writes it.
                self._head(thread_agent_id(thread_id), thread_id)
            protocol = self._protocol(thread_agent_id(thread_id))
            owned = Owned(protocol, self._take_over(protocol, thread_id, read_head=read_head))
            with self._lock:
                self._owned[thread_id] = owned
        return owned

    def _take_over(self, protocol: AgentProtocol, thread_id: str, *, read_head: bool) -> ThreadHead:
        """Register, load the head (or, without `read_head`, start from an empty one), and
        obey the rollback order a re-registration leaves (the coordinator refuses writes
        until it is acknowledged; a retried write would be answered from the dedupe table
        with that refusal, so it must come first)."""
        self.ensure_group()
        resp = self._drive(protocol.register())
        if read_head:
            head = self._load(protocol, None, thread_id)
            assert head is not None  # a thread id was given: a new thread starts empty
        else:
            protocol.start_over()
            head = ThreadHead(thread_id, seal_after=self.seal_after)
        if resp.incarnation > 1:
            self._drive(protocol.sync_orders())
        return head

    def commit(self, thread_id: str, head: ThreadHead) -> None:
        """Make `head` the thread's head (what `change` commits); ThreadFenced if another
        writer took the thread."""
        owned = self._owner(thread_id)
        try:
            self._commit(owned, head)
        except Rejected as exc:
            if exc.reason_code in REFUSED_AS_STALE:
                with self._lock:
                    self._owned.pop(thread_id, None)
                    self._fenced[thread_id] = exc.reason
                    self._check_not_fenced(thread_id)
            raise

    def _check_not_fenced(self, thread_id: str) -> None:
        """Called with self._lock held."""
        if thread_id in self._fenced:
            raise ThreadFenced(f"thread {thread_id!r} has a newer writer: {self._fenced[thread_id]}")

    def _commit(self, owned: Owned, head: ThreadHead) -> None:
        try:
            self._drive(owned.protocol.checkpoint(head.to_json()))
        except Rejected as exc:
            if exc.reason_code not in REFUSED_UNTIL_REGISTERED:
                raise
            # Our lease lapsed: register again (a new request id).
            self._take_over(owned.protocol, head.thread_id, read_head=True)
            self._drive(owned.protocol.checkpoint(head.to_json()))
        owned.head = head


def _in_store(blobs: BlobStore, uri: str) -> bool:
    """Whether `blobs` reads `uri` (a store that cannot tell is assumed to)."""
    holds = getattr(blobs, "holds", None)
    return holds is None or holds(uri)
