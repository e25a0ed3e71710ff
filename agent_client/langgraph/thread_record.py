"""One LangGraph thread as a JSON document: the state a thread's raftpoint agent checkpoints.

Pure data and rules, no I/O: which checkpoints a thread holds per namespace, their
parents, the channel versions each one sees, where each channel version's value is
stored (a content-addressed blob URI, or None for LangGraph's "empty" marker), and
the pending writes of each checkpoint. Serialized values travel as
[type, base64] pairs, exactly as the saver's serde produced them.

The rules LangGraph's contract asks of a saver live here once, for the saver and its
tests: the latest checkpoint is the greatest id (ids are time-ordered UUIDs); pending
writes come back in `writes_sort_key` order; a write with a non-negative index is
stored once per (task, index) and a special one (error, interrupt, ...) replaced.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from langgraph.checkpoint.base import writes_sort_key

Typed = tuple[str, bytes]


def typed_to_json(value: Typed) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def typed_from_json(value: list[str]) -> Typed:
    return value[0], base64.b64decode(value[1])


def version_key(version: Any) -> str:
    """Channel versions may be int, float or str: the JSON of the value keeps 1 and "1" apart."""
    return json.dumps(version)


@dataclass(frozen=True)
class StoredCheckpoint:
    checkpoint_ns: str
    checkpoint_id: str
    checkpoint: Typed  # the checkpoint without its channel values
    metadata: Typed
    parent_id: str | None
    versions: Mapping[str, str]  # channel -> version key, to find the values
    writes: list[tuple[str, str, Typed]]  # (task id, channel, value) in writes_sort_key order


class ThreadRecord:
    """A thread's checkpoints, value references and writes, as one JSON-able dict."""

    def __init__(self, thread_id: str, doc: Mapping[str, Any] | None = None) -> None:
        """Copies the containers a change may modify; the entries inside (a checkpoint's
        dict, a write's list) are never changed in place, so copies share them."""
        doc = doc or {}
        self.thread_id = thread_id
        self.checkpoints: dict[str, dict[str, dict[str, Any]]] = {
            ns: dict(by_id) for ns, by_id in doc.get("checkpoints", {}).items()}
        self.values: dict[str, dict[str, dict[str, str | None]]] = {
            ns: {ch: dict(refs) for ch, refs in chans.items()} for ns, chans in doc.get("values", {}).items()}
        self.writes: dict[str, dict[str, list[list[Any]]]] = {
            ns: {cid: list(ws) for cid, ws in by_id.items()} for ns, by_id in doc.get("writes", {}).items()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ThreadRecord":
        return cls(str(doc["thread_id"]), doc)

    def to_json(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "checkpoints": self.checkpoints, "values": self.values,
                "writes": self.writes}

    def copy_as(self, thread_id: str) -> "ThreadRecord":
        return ThreadRecord(thread_id, self.to_json())

    @property
    def empty(self) -> bool:
        return not any(self.checkpoints.values())

    # ---- writes to the record ------------------------------------------------------------
    def put(self, ns: str, checkpoint_id: str, checkpoint: Typed, metadata: Typed, parent_id: str | None,
            versions: Mapping[str, Any], new_values: Mapping[str, tuple[Any, str | None]]) -> None:
        """`versions` is the checkpoint's channel_versions; `new_values` maps each channel
        of new_versions to (its new version, its value's blob URI or None when empty)."""
        refs = self.values.setdefault(ns, {})
        for channel, (version, uri) in new_values.items():
            refs.setdefault(channel, {})[version_key(version)] = uri
        self.checkpoints.setdefault(ns, {})[checkpoint_id] = {
            "c": typed_to_json(checkpoint), "m": typed_to_json(metadata), "p": parent_id,
            "v": {ch: version_key(v) for ch, v in versions.items()}}

    def put_writes(self, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   writes: list[tuple[int, str, Typed]]) -> bool:
        """(index, channel, value) per write; returns whether anything changed, so a
        retried put_writes commits nothing new."""
        stored = self.writes.setdefault(ns, {}).setdefault(checkpoint_id, [])
        at = {(w[0], w[1]): i for i, w in enumerate(stored)}
        changed = False
        for idx, channel, value in writes:
            entry = [task_id, idx, channel, typed_to_json(value), task_path]
            where = at.get((task_id, idx))
            if where is None:
                at[(task_id, idx)] = len(stored)
                stored.append(entry)
                changed = True
            elif idx < 0 and stored[where] != entry:
                stored[where] = entry
                changed = True
        return changed

    def delete_where(self, doomed: Callable[[str, str, dict[str, Any]], bool]) -> bool:
        """Drop the checkpoints `doomed(ns, id, entry)` names, their writes, and the value
        references no remaining checkpoint uses; returns whether anything went."""
        changed = False
        for ns, by_id in list(self.checkpoints.items()):
            for checkpoint_id, entry in list(by_id.items()):
                if doomed(ns, checkpoint_id, entry):
                    del by_id[checkpoint_id]
                    self.writes.get(ns, {}).pop(checkpoint_id, None)
                    changed = True
            if not by_id:
                del self.checkpoints[ns]
        if changed:
            self._drop_unused_values()
        return changed

    def keep_latest(self) -> bool:
        latest = {ns: max(by_id) for ns, by_id in self.checkpoints.items() if by_id}
        return self.delete_where(lambda ns, checkpoint_id, _: checkpoint_id != latest[ns])

    def _drop_unused_values(self) -> None:
        used = {(ns, ch, key) for ns, by_id in self.checkpoints.items() for e in by_id.values()
                for ch, key in e["v"].items()}
        self.values = {ns: kept for ns, chans in self.values.items()
                       if (kept := {ch: {k: uri for k, uri in refs.items() if (ns, ch, k) in used}
                                    for ch, refs in chans.items()})}
        self.values = {ns: {ch: refs for ch, refs in chans.items() if refs} for ns, chans in self.values.items()}
        self.writes = {ns: w for ns, w in self.writes.items() if w}

    # ---- reads ---------------------------------------------------------------------------
    def value_uris(self, ns: str, versions: Mapping[str, str]) -> dict[str, str]:
        """channel -> blob URI of the values a checkpoint sees (empty channels left out)."""
        refs = self.values.get(ns, {})
        return {ch: uri for ch, key in versions.items() if (uri := refs.get(ch, {}).get(key)) is not None}

    def latest_id(self, ns: str) -> str | None:
        by_id = self.checkpoints.get(ns)
        return max(by_id) if by_id else None

    def get(self, ns: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        checkpoint_id = checkpoint_id or self.latest_id(ns)
        entry = self.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else None
        if entry is None or checkpoint_id is None:
            return None
        return self._stored(ns, checkpoint_id, entry)

    def _stored(self, ns: str, checkpoint_id: str, entry: Mapping[str, Any]) -> StoredCheckpoint:
        writes = sorted(self.writes.get(ns, {}).get(checkpoint_id, []), key=lambda w: writes_sort_key(w[4], w[0], w[1]))
        return StoredCheckpoint(ns, checkpoint_id, typed_from_json(entry["c"]), typed_from_json(entry["m"]),
                                entry["p"], dict(entry["v"]), [(w[0], w[2], typed_from_json(w[3])) for w in writes])

    def newest_first(self, ns: str | None = None, checkpoint_id: str | None = None,
                     before: str | None = None) -> Iterator[StoredCheckpoint]:
        """The thread's checkpoints, newest first, in namespace `ns` (None: all)."""
        for name, by_id in self.checkpoints.items():
            if ns is not None and name != ns:
                continue
            for cid in sorted(by_id, reverse=True):
                if (checkpoint_id and cid != checkpoint_id) or (before and cid >= before):
                    continue
                yield self._stored(name, cid, by_id[cid])
