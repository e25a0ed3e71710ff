"""The pieces of a LangGraph thread's stored form: checkpoint entries, value references, writes.

Pure data and rules, no I/O. A thread is a chain of layers (thread_history.py); each
layer holds items in the order they were written and the value references its
checkpoints see:

- a checkpoint entry: {"ns", "id", "c": checkpoint without values, "m": metadata,
  "p": parent id, "v": {channel: version key}, "w": its pending writes};
- a writes patch: {"ns", "id", "w"}: writes to a checkpoint sealed in an older layer;
- values: {ns: {channel: {version key: ref}}}, a ref being {"u": blob URI},
  {"i": serialized value} (small values travel inline) or None (LangGraph's "empty").

Serialized values travel as [type, base64] pairs, exactly as the saver's serde made them.
The rules LangGraph's contract asks of a saver live here once: pending writes come
back in `writes_sort_key` order; a write with a non-negative index is stored once per
(task, index) and a special one (error, interrupt, ...) replaced.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from langgraph.checkpoint.base import writes_sort_key

Typed = tuple[str, bytes]
Ref = dict[str, Any] | None
Write = list[Any]  # [task id, index, channel, typed JSON, task path]
Values = dict[str, dict[str, dict[str, Ref]]]


def typed_to_json(value: Typed) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def typed_from_json(value: list[str]) -> Typed:
    return value[0], base64.b64decode(value[1])


def version_key(version: Any) -> str:
    """Channel versions may be int, float or str: the JSON of the value keeps 1 and "1" apart."""
    return json.dumps(version)


def uri_ref(uri: str) -> Ref:
    return {"u": uri}


def inline_ref(value: Typed) -> Ref:
    return {"i": typed_to_json(value)}


def merge_writes(stored: list[Write], task_id: str, task_path: str,
                 writes: Iterable[tuple[int, str, Typed]]) -> bool:
    """Add (index, channel, value) writes of a task to `stored`, in place; returns
    whether anything changed, so a retried put_writes commits nothing new."""
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


def patched(writes: list[Write], patches: Iterable[list[Write]]) -> list[Write]:
    """A checkpoint's writes with later patches (oldest first) applied by merge_writes's rules."""
    merged = list(writes)
    for patch in patches:
        for task_id, idx, channel, value, path in patch:
            merge_writes(merged, task_id, path, [(idx, channel, typed_from_json(value))])
    return merged


@dataclass(frozen=True)
class StoredCheckpoint:
    checkpoint_ns: str
    checkpoint_id: str
    checkpoint: Typed  # the checkpoint without its channel values
    metadata: Typed
    parent_id: str | None
    versions: Mapping[str, str]  # channel -> version key
    refs: Mapping[str, Ref]  # channel -> where its value is (channels whose value was never stored left out)
    writes: list[Write]  # as stored; `sorted_writes` gives LangGraph's order

    def sorted_writes(self) -> list[tuple[str, str, Typed]]:
        """(task id, channel, value) in writes_sort_key order."""
        ordered = sorted(self.writes, key=lambda w: writes_sort_key(w[4], w[0], w[1]))
        return [(w[0], w[2], typed_from_json(w[3])) for w in ordered]


def entry(ns: str, checkpoint_id: str, checkpoint: Typed, metadata: Typed, parent_id: str | None,
          versions: Mapping[str, str], writes: list[Write]) -> dict[str, Any]:
    return {"ns": ns, "id": checkpoint_id, "c": typed_to_json(checkpoint), "m": typed_to_json(metadata),
            "p": parent_id, "v": dict(versions), "w": writes}


def is_checkpoint(item: Mapping[str, Any]) -> bool:
    return "c" in item


def stored_from(item: Mapping[str, Any], values: Values, writes: list[Write]) -> StoredCheckpoint:
    """The checkpoint an entry describes, its refs found in its layer's `values`."""
    ns = item["ns"]
    known = values.get(ns, {})
    refs = {ch: known[ch][key] for ch, key in item["v"].items() if key in known.get(ch, {})}
    return StoredCheckpoint(ns, item["id"], typed_from_json(item["c"]), typed_from_json(item["m"]), item["p"],
                            dict(item["v"]), refs, writes)


def stored_from_v1(doc: Mapping[str, Any]) -> list[StoredCheckpoint]:
    """The checkpoints of a thread written as one whole-thread record (the first format:
    {"checkpoints": {ns: {id: entry}}, "values": {ns: {ch: {key: uri}}}, "writes": ...}), oldest first."""
    out = []
    for ns, by_id in doc.get("checkpoints", {}).items():
        values = {ns: {ch: {k: (None if uri is None else uri_ref(uri)) for k, uri in refs.items()}
                       for ch, refs in doc.get("values", {}).get(ns, {}).items()}}
        for checkpoint_id, e in by_id.items():
            item = {"ns": ns, "id": checkpoint_id, **e}
            out.append(stored_from(item, values, list(doc.get("writes", {}).get(ns, {}).get(checkpoint_id, []))))
    return sorted(out, key=lambda s: s.checkpoint_id)
