"""RaftpointSaver: a LangGraph checkpoint saver whose threads are fenced raftpoint agents.

Checkpoint metadata, parents, channel versions and pending writes go through the
coordinator: each step appends its checkpoint to the thread's head, committed as the
thread's agent's checkpoint, and seals the older ones into segments now and then
(threads.py, thread_history.py), so a step writes what it changed, not the thread's
history. Channel values of at most `inline_max` serialized bytes travel inside the
head; larger ones go to the blob store, content-addressed, and only the channels a
step changed (its `new_versions`) are stored. Calls on one thread that overlap (LangGraph
makes a step's put_writes and put from worker threads) are committed together, each
returning once a commit holding it is acknowledged (group_commit.py). The async methods
run the blocking ones in the saver's own worker threads (`_off_loop`): the work is a
few RPCs and blob writes, one implementation keeps the sync and async faces from
drifting apart, and different threads run side by side.

A thread whose blobs this saver cannot read (missing, damaged, or in another saver's
store: savers of one group may each have their own) raises ThreadUnreadable when it is
asked for by id (get_tuple, list of that thread, copy_thread from it, writes to it);
a walk over the group's threads (list without a thread, delete_for_runs) leaves it out
with one warning; delete_thread removes it all the same.
"""
from __future__ import annotations

import asyncio
import builtins
import contextvars
import itertools
import json
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Sequence, TypeVar

from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                       CheckpointMetadata, CheckpointTuple, get_checkpoint_id,
                                       get_checkpoint_metadata)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langchain_core.runnables import RunnableConfig

from agent_client import group_fork
from agent_client.blobstore import BlobCorrupted, BlobMissing, BlobStore, LocalBlobStore, open_blob_store
from agent_client.connection import Connection
from coordinator.channels import ClientTLS
from agent_client.langgraph.thread_history import SEAL_AFTER, Namespaces, ThreadHead, rebuild, sealed_namespaces
from agent_client.langgraph.thread_record import (Ref, StoredCheckpoint, Typed, inline_ref, typed_from_json,
                                                  uri_ref, version_key)
from agent_client.langgraph.threads import ThreadStore, ThreadUnreadable, thread_agent_id

DEFAULT_GROUP = "langgraph"
VALUE_CACHE = 1024  # channel value blobs kept in memory, by URI
SEGMENT_CACHE = 256  # sealed segments kept in memory, by URI
NAMESPACE_CACHE = 1024  # threads whose sealed namespaces are kept in memory
# Values up to this many serialized bytes travel inside the head instead of as blobs of
# their own: each blob costs two files and their fsyncs, an inline value only its bytes
# in the steps' heads (benchmarks/langgraph_saver.py --inline-sweep measures the trade).
INLINE_MAX = 1024
# Async calls in flight at once, each on a worker thread of the saver's own (one that
# waits for a commit holds a thread, not a core). asyncio's default pool (cores + 4
# threads, at most 32) let only that many calls commit at once, when the cluster
# commits many at once in little more time than one (Raft batches them).
ASYNC_WORKERS = 64

T = TypeVar("T")


@contextmanager
def _reading(thread_id: str) -> Iterator[None]:
    """A blob of the thread that cannot be read fails the thread: ThreadUnreadable naming it."""
    try:
        yield
    except (BlobMissing, BlobCorrupted) as exc:
        raise ThreadUnreadable(thread_agent_id(thread_id), f"thread {thread_id!r}: a blob of it cannot be read from "
                               f"this saver's blob store: {exc}") from exc


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class RaftpointSaver(BaseCheckpointSaver[int]):
    """LangGraph checkpoints through raftpoint.

        saver = RaftpointSaver(["127.0.0.1:50051", ...], "/var/lib/agent/blobs")
        graph = builder.compile(checkpointer=saver)

    Writing a thread makes this saver its only writer: a saver (in any process) that
    wrote it before is fenced and its next write raises ThreadFenced."""

    def __init__(self, endpoints: Sequence[str] | str, blob_store: BlobStore | str | Path, *,
                 group: str = DEFAULT_GROUP, serde: SerializerProtocol | None = None, deadline: float = 30.0,
                 token: str | None = None, tls: ClientTLS | None = None, inline_max: int = INLINE_MAX,
                 seal_after: int = SEAL_AFTER) -> None:
        """`inline_max`: values up to this many serialized bytes go inside the thread's
        head (0: every value is a blob); `seal_after`: checkpoints per sealed segment."""
        if inline_max < 0 or seal_after < 1:
            raise ValueError(f"inline_max must be >= 0 and seal_after >= 1 (got {inline_max}, {seal_after})")
        super().__init__(serde=serde)
        self.conn = Connection([endpoints] if isinstance(endpoints, str) else list(endpoints), deadline=deadline,
                               token=token, tls=tls)
        self.blobs: BlobStore = blob_store if not isinstance(blob_store, (str, Path)) else open_blob_store(blob_store)
        self.threads = ThreadStore(self.conn, group, self.blobs, seal_after=seal_after)
        self.inline_max = inline_max
        # Values and segments are content-addressed, so a URI's bytes never change: reads
        # of recent checkpoints skip the blob store (and its digest checks) for those seen before.
        self._blob = lru_cache(maxsize=VALUE_CACHE)(self.blobs.get)
        self._segment: Callable[[str], Any] = lru_cache(maxsize=SEGMENT_CACHE)(
            lambda uri: json.loads(self.blobs.get(uri)))
        self._namespaces: dict[str, Namespaces] = {}  # thread -> its sealed chain's namespaces
        self._namespaces_lock = threading.Lock()
        self._workers = ThreadPoolExecutor(max_workers=ASYNC_WORKERS, thread_name_prefix="raftpoint-langgraph")
        weakref.finalize(self, self._workers.shutdown, wait=False)  # idle threads go with the saver

    def close(self) -> None:
        self._workers.shutdown(wait=False)
        self.conn.close()

    def __enter__(self) -> "RaftpointSaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- values and segments ---------------------------------------------------------------
    def _ref(self, value: Any) -> Ref:
        typed = self.serde.dumps_typed(value)
        if len(typed[1]) <= self.inline_max:
            return inline_ref(typed)
        return uri_ref(self.blobs.put(_pack(typed), inline=False).uri)

    def _value(self, ref: Ref) -> Any:
        assert ref is not None
        typed = typed_from_json(ref["i"]) if "i" in ref else _unpack(self._blob(ref["u"]))
        return self.serde.loads_typed(typed)

    def _seal(self, segment: dict[str, Any]) -> str:
        return self.blobs.put(json.dumps(segment, sort_keys=True, separators=(",", ":")).encode(), inline=False).uri

    def _tuple(self, thread_id: str, stored: StoredCheckpoint) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed(stored.checkpoint)
        values = {ch: self._value(ref) for ch, ref in stored.refs.items() if ref is not None}
        checkpoint = {**checkpoint, "channel_values": values}
        parent = _config(thread_id, stored.checkpoint_ns, stored.parent_id) if stored.parent_id else None
        return CheckpointTuple(config=_config(thread_id, stored.checkpoint_ns, stored.checkpoint_id),
                               checkpoint=checkpoint, metadata=self.serde.loads_typed(stored.metadata),
                               parent_config=parent,
                               pending_writes=[(t, c, self.serde.loads_typed(v)) for t, c, v in stored.sorted_writes()])

    # ---- the saver contract -----------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        with _reading(conf["thread_id"]):
            head = self.threads.read(conf["thread_id"])
            ns, checkpoint_id = conf.get("checkpoint_ns", ""), get_checkpoint_id(config)
            if head is None or (checkpoint_id is None and not self._may_hold(head, ns)):
                return None
            stored = head.find(ns, checkpoint_id, self._segment)
            return None if stored is None else self._tuple(head.thread_id, stored)

    def _may_hold(self, head: ThreadHead, ns: str) -> bool:
        """Whether the thread has a checkpoint in namespace `ns`, without walking its segments."""
        if ns in head.tail_namespaces:
            return True
        with self._namespaces_lock:
            known = self._namespaces.get(head.thread_id)
        found = sealed_namespaces(head, self._segment, known)
        if found is None:
            return False
        with self._namespaces_lock:
            self._namespaces.pop(head.thread_id, None)
            self._namespaces[head.thread_id] = found  # the most recently asked last
            while len(self._namespaces) > NAMESPACE_CACHE:
                del self._namespaces[next(iter(self._namespaces))]
        return ns in found[1]

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        before_id = get_checkpoint_id(before) if before else None

        def of(head: ThreadHead) -> Iterator[CheckpointTuple]:
            with _reading(head.thread_id):
                for stored in head.newest_first(self._segment, conf.get("checkpoint_ns"), conf.get("checkpoint_id"),
                                                before_id):
                    if filter:
                        metadata = self.serde.loads_typed(stored.metadata)
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    yield self._tuple(head.thread_id, stored)

        if "thread_id" in conf:  # the thread asked for: that it cannot be read is the answer
            with _reading(conf["thread_id"]):
                head = self.threads.read(conf["thread_id"])
            found = iter(()) if head is None else of(head)
        else:
            found = self._every_thread(of)
        yield from found if limit is None else itertools.islice(found, max(limit, 0))

    def _every_thread(self, of: Callable[[ThreadHead], Iterator[CheckpointTuple]]) -> Iterator[CheckpointTuple]:
        """`of(head)` for each thread of the group, leaving out (from where it failed) a
        thread that cannot be read."""
        for head in self.threads.heads():
            try:
                yield from of(head)
            except ThreadUnreadable as exc:
                self.threads.skip(exc)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        values = checkpoint["channel_values"]
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        new_refs = {ch: (version_key(v), self._ref(values[ch]) if ch in values else None)
                    for ch, v in new_versions.items()}
        typed, typed_metadata = self.serde.dumps_typed(bare), self.serde.dumps_typed(
            get_checkpoint_metadata(config, metadata))
        versions = {ch: version_key(v) for ch, v in checkpoint["channel_versions"].items()}

        def added(newest: ThreadHead, seal: bool) -> ThreadHead:
            head = newest.copy_as(thread_id)
            if seal:
                head.sealed_into(self._seal(head.segment()))
            head.put(ns, checkpoint["id"], typed, typed_metadata, conf.get("checkpoint_id"), versions, new_refs,
                     self._segment)
            return head

        def edit(newest: ThreadHead) -> ThreadHead:
            head = added(newest, newest.seal_due)
            if not newest.seal_due and newest.seal_pays(head, self.threads.inline_head_bytes):
                head = added(newest, True)  # a head that travels in its commit: no blob write per step
            return head

        with _reading(thread_id):
            self.threads.change(thread_id, edit)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        entries = [(WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
                   for idx, (channel, value) in enumerate(writes)]

        def edit(newest: ThreadHead) -> ThreadHead | None:
            head = newest.copy_as(thread_id)
            changed = head.put_writes(conf.get("checkpoint_ns", ""), conf["checkpoint_id"], task_id, task_path,
                                      entries, self._segment)
            return head if changed else None

        with _reading(thread_id):
            self.threads.change(thread_id, edit)

    def delete_thread(self, thread_id: str) -> None:
        self.threads.clear(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Threads that cannot be read are left out (with a warning): their runs stay."""
        doomed = set(run_ids)
        if not doomed:
            return
        for thread_id in [head.thread_id for head in self.threads.heads()]:
            try:
                self._keep(thread_id, lambda kept: [s for s in kept
                                                    if self.serde.loads_typed(s.metadata).get("run_id") not in doomed])
            except ThreadUnreadable as exc:
                self.threads.skip(exc)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        with _reading(source_thread_id):
            source = self.threads.read(source_thread_id)
        if source is None or source.empty:
            return
        self.threads.change(target_thread_id, lambda _: source.copy_as(target_thread_id))

    def fork_threads(self, thread_ids: Sequence[str], into: str) -> None:
        """Copy these threads, together and as they are now, into `into`, a new group; a
        saver on it (`group=into`) reads and goes on with them, and this group's threads
        go on untouched. The cut is one savepoint of this group; the fork reads from
        copies of the threads' heads in this saver's blob store, so garbage collection
        of either group leaves the other's. Needs an admin identity (savepoints and forks
        are admin RPCs); ValueError for a thread that has no checkpoint yet."""
        if not isinstance(self.blobs, LocalBlobStore):
            raise TypeError("forking threads copies manifests: the saver's blob store must be a LocalBlobStore")
        empty = [t for t in thread_ids if self.threads.read(t) is None]
        if empty:
            raise ValueError(f"thread {empty[0]!r} has no checkpoint to fork")
        group_fork.fork_now(self.conn, self.blobs, self.threads.group, into, [thread_agent_id(t) for t in thread_ids])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._keep(thread_id, _latest_per_namespace)

    # builtins.list: in this class `list` is the saver's method.
    def _keep(self, thread_id: str,
              keep: Callable[[builtins.list[StoredCheckpoint]], builtins.list[StoredCheckpoint]]) -> None:
        """Rewrite the thread with the checkpoints `keep(all, newest first)` returns, if it
        drops any (checked before taking the thread over, and again on its newest head)."""
        def dropping(head: ThreadHead) -> builtins.list[StoredCheckpoint] | None:
            everything = list(head.newest_first(self._segment))
            kept = keep(everything)
            return None if len(kept) == len(everything) else kept

        def edit(newest: ThreadHead) -> ThreadHead | None:
            kept = dropping(newest)
            return None if kept is None else rebuild(thread_id, reversed(kept), self._seal,
                                                     seal_after=self.threads.seal_after)

        with _reading(thread_id):
            head = self.threads.read(thread_id)
            if head is not None and dropping(head) is not None:
                self.threads.change(thread_id, edit)

    # ---- async: the same work in a worker thread ---------------------------------------------
    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on one of the saver's worker threads, in the caller's context
        (its trace span), as asyncio.to_thread would on the loop's default pool. Safe to
        run many at once: calls on different threads share only the connection (gRPC
        channels are thread-safe), the blob store (its puts run side by side: store.py)
        and the saver's caches and table of threads (each behind a lock), and calls on
        one thread take turns in its group commit, so a thread's writes keep their order,
        overlapping ones are committed together, and a refused commit fails each of them."""
        call = partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._workers, call)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._off_loop(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await self._off_loop(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self._off_loop(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._off_loop(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._off_loop(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._off_loop(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._off_loop(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._off_loop(self.prune, thread_ids, strategy=strategy)


def _latest_per_namespace(newest_first: list[StoredCheckpoint]) -> list[StoredCheckpoint]:
    seen: set[str] = set()
    kept = []
    for s in newest_first:
        if s.checkpoint_ns not in seen:
            seen.add(s.checkpoint_ns)
            kept.append(s)
    return kept


def _pack(value: Typed) -> bytes:
    """A serialized channel value as one blob: its serde type, a newline, its bytes."""
    kind, data = value
    return kind.encode() + b"\n" + data


def _unpack(blob: bytes) -> Typed:
    kind, _, data = blob.partition(b"\n")
    return kind.decode(), data
