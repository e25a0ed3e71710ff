"""RaftpointSaver: a LangGraph checkpoint saver whose threads are fenced raftpoint agents.

Checkpoint metadata, parents and channel versions go through the coordinator (each
thread's record, committed as its agent's checkpoint: see threads.py); channel values
go to the blob store, content-addressed, and only the channels a step changed (its
`new_versions`) are uploaded. The async methods run the blocking ones in a worker
thread: the work is a few RPCs and blob writes, and one implementation keeps the sync
and async faces from drifting apart.
"""
from __future__ import annotations

import asyncio
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Sequence

from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                       CheckpointMetadata, CheckpointTuple, get_checkpoint_id,
                                       get_checkpoint_metadata)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langchain_core.runnables import RunnableConfig

from agent_client.blobstore import BlobStore, open_blob_store
from agent_client.connection import Connection
from coordinator.channels import ClientTLS
from agent_client.langgraph.thread_record import StoredCheckpoint, ThreadRecord, Typed, typed_from_json
from agent_client.langgraph.threads import ThreadStore

DEFAULT_GROUP = "langgraph"
VALUE_CACHE = 1024  # channel value blobs kept in memory, by URI


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
                 token: str | None = None, tls: ClientTLS | None = None) -> None:
        super().__init__(serde=serde)
        self.conn = Connection([endpoints] if isinstance(endpoints, str) else list(endpoints), deadline=deadline,
                               token=token, tls=tls)
        self.blobs: BlobStore = blob_store if not isinstance(blob_store, (str, Path)) else open_blob_store(blob_store)
        self.threads = ThreadStore(self.conn, group, self.blobs)
        self._lock = threading.RLock()
        # Values are content-addressed, so a URI's bytes never change: reads of recent
        # checkpoints skip the blob store (and its digest checks) for values seen before.
        self._blob = lru_cache(maxsize=VALUE_CACHE)(self.blobs.get)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "RaftpointSaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- values ----------------------------------------------------------------------------
    def _upload(self, value: Any) -> str:
        return self.blobs.put(_pack(self.serde.dumps_typed(value))).uri

    def _download(self, uri: str) -> Any:
        return self.serde.loads_typed(_unpack(self._blob(uri)))

    def _tuple(self, record: ThreadRecord, stored: StoredCheckpoint) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed(stored.checkpoint)
        uris = record.value_uris(stored.checkpoint_ns, stored.versions)
        checkpoint = {**checkpoint, "channel_values": {ch: self._download(uri) for ch, uri in uris.items()}}
        parent = (_config(record.thread_id, stored.checkpoint_ns, stored.parent_id) if stored.parent_id else None)
        return CheckpointTuple(config=_config(record.thread_id, stored.checkpoint_ns, stored.checkpoint_id),
                               checkpoint=checkpoint, metadata=self.serde.loads_typed(stored.metadata),
                               parent_config=parent,
                               pending_writes=[(t, c, self.serde.loads_typed(v)) for t, c, v in stored.writes])

    # ---- the saver contract -----------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        record = self.threads.read(conf["thread_id"])
        if record is None:
            return None
        stored = record.get(conf.get("checkpoint_ns", ""), get_checkpoint_id(config))
        return None if stored is None else self._tuple(record, stored)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        thread_ids = [conf["thread_id"]] if "thread_id" in conf else list(self.threads.thread_ids())
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in thread_ids:
            record = self.threads.read(thread_id)
            if record is None:
                continue
            for stored in record.newest_first(conf.get("checkpoint_ns"), conf.get("checkpoint_id"), before_id):
                if filter:
                    metadata = self.serde.loads_typed(stored.metadata)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if limit is not None and limit <= 0:
                    return
                if limit is not None:
                    limit -= 1
                yield self._tuple(record, stored)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        values = checkpoint["channel_values"]
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        uploaded = {ch: (v, self._upload(values[ch]) if ch in values else None) for ch, v in new_versions.items()}
        with self._lock:
            record = self.threads.own(thread_id).copy_as(thread_id)
            record.put(ns, checkpoint["id"], self.serde.dumps_typed(bare),
                       self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)), conf.get("checkpoint_id"),
                       checkpoint["channel_versions"], uploaded)
            self.threads.commit(thread_id, record)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        entries = [(WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
                   for idx, (channel, value) in enumerate(writes)]
        with self._lock:
            record = self.threads.own(thread_id).copy_as(thread_id)
            if record.put_writes(conf.get("checkpoint_ns", ""), conf["checkpoint_id"], task_id, task_path, entries):
                self.threads.commit(thread_id, record)

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            if self.threads.read(thread_id) is None:
                return
            self.threads.own(thread_id)
            self.threads.commit(thread_id, ThreadRecord(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed = set(run_ids)
        if not doomed:
            return
        self._rewrite_all(lambda r: r.delete_where(
            lambda ns, cid, entry: self.serde.loads_typed(typed_from_json(entry["m"])).get("run_id") in doomed))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        with self._lock:
            source = self.threads.read(source_thread_id)
            if source is None or source.empty:
                return
            self.threads.own(target_thread_id)
            self.threads.commit(target_thread_id, source.copy_as(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._rewrite(thread_id, ThreadRecord.keep_latest)

    def _rewrite_all(self, change: Any) -> None:
        for thread_id in list(self.threads.thread_ids()):
            self._rewrite(thread_id, change)

    def _rewrite(self, thread_id: str, change: Any) -> None:
        """Apply `change(record) -> changed?` to a copy of the thread and commit it if it changed."""
        with self._lock:
            current = self.threads.read(thread_id)
            if current is None:
                return
            record = current.copy_as(thread_id)
            if change(record):
                self.threads.own(thread_id)
                self.threads.commit(thread_id, record)

    # ---- async: the same work in a worker thread ---------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _pack(value: Typed) -> bytes:
    """A serialized channel value as one blob: its serde type, a newline, its bytes."""
    kind, data = value
    return kind.encode() + b"\n" + data


def _unpack(blob: bytes) -> Typed:
    kind, _, data = blob.partition(b"\n")
    return kind.decode(), data
