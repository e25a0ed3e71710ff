"""A LangGraph thread as an append-only chain: a small head and immutable sealed segments.

Pure rules, no I/O: reading a segment goes through the `fetch` the caller passes.

The head (what a thread's raftpoint agent commits at every step) holds the tail: the
items written since the last seal, and the value references they see. Once the tail
holds `seal_after` items, the next step seals it: the tail becomes a segment, stored
once as an immutable blob that points to the segment before it, and the head keeps
only that segment's URI. So a step writes its own checkpoint and at most one segment,
never the thread's history, and every checkpoint stays reachable from the head.

A step also seals the tail early when that keeps the head small enough to travel
inside its commit (`seal_pays`): a head that does not is a blob of its own, a file
and its syncs before every commit, where a segment is one such write per seal.

Reads walk newest first: the tail, then segment after segment. Each layer records the
greatest checkpoint id of everything older than it (`older_max`), so a walk yields a
checkpoint as soon as no older layer can hold a newer one: the latest checkpoint and
`list(limit=k)` read the head and about k / seal_after segments whatever the thread's
length, and a lookup of an id stops at the layer that holds it.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from agent_client.langgraph.thread_record import (Ref, StoredCheckpoint, Typed, Values, entry, is_checkpoint,
                                                  merge_writes, patched, stored_from, stored_from_v1)
from agent_client.state_codec import canonical_json

FORMAT = 2
SEAL_AFTER = 16  # tail items per segment: the head's bound, and how many steps share one segment blob
# What a segment's URI is taken to cost in a head before the thread has one to measure.
SEGMENT_URI_ALLOWANCE = 256

Fetch = Callable[[str], Mapping[str, Any]]  # a segment's URI -> its JSON


class UnknownFormat(ValueError):
    """A thread written by a newer saver."""


def _key(item: Mapping[str, Any]) -> tuple[str, str]:
    return item["ns"], item["id"]


def _used(items: Iterable[Mapping[str, Any]], values: Values) -> Values:
    """The part of `values` the checkpoint entries among `items` refer to."""
    out: Values = {}
    for item in items:
        if not is_checkpoint(item):
            continue
        known = values.get(item["ns"], {})
        for ch, key in item["v"].items():
            if key in known.get(ch, {}):
                out.setdefault(item["ns"], {}).setdefault(ch, {})[key] = known[ch][key]
    return out


class ThreadHead:
    """A thread's head: its tail and the newest sealed segment; copy before changing."""

    def __init__(self, thread_id: str, doc: Mapping[str, Any] | None = None, *, seal_after: int = SEAL_AFTER) -> None:
        """Copies the containers a change modifies; items are replaced, never changed in
        place, so copies (and cached segments) share them."""
        doc = doc or {}
        self.thread_id, self.seal_after = thread_id, seal_after
        tail = doc.get("tail", {})
        self.items: list[dict[str, Any]] = list(tail.get("items", []))
        self.values: Values = {ns: {ch: dict(refs) for ch, refs in chans.items()}
                               for ns, chans in tail.get("values", {}).items()}
        self.sealed: str | None = doc.get("sealed")
        self.sealed_max: str | None = doc.get("sealed_max")

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, seal_after: int = SEAL_AFTER) -> "ThreadHead":
        """A head, or a whole-thread record of the first format read as one unsealed
        tail (the next step seals it into a segment)."""
        thread_id = str(doc["thread_id"])
        if "checkpoints" in doc:
            head = cls(thread_id, seal_after=seal_after)
            for stored in stored_from_v1(doc):
                head.add(stored)
            return head
        if doc.get("format") != FORMAT:
            raise UnknownFormat(f"thread {thread_id!r} is stored in format {doc.get('format')!r}; this saver reads "
                                f"formats 1 and {FORMAT}: upgrade raftpoint to read it")
        return cls(thread_id, doc, seal_after=seal_after)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "thread_id": self.thread_id, "tail": {"items": self.items, "values": self.values},
                "sealed": self.sealed, "sealed_max": self.sealed_max}

    def copy_as(self, thread_id: str) -> "ThreadHead":
        """The same history under another thread id (segments are shared: they never change)."""
        return ThreadHead(thread_id, self.to_json(), seal_after=self.seal_after)

    @property
    def empty(self) -> bool:
        return not self.items and self.sealed is None

    # ---- sealing -------------------------------------------------------------------------
    @property
    def seal_due(self) -> bool:
        return len(self.items) >= self.seal_after

    def encoded_size(self) -> int:
        """Bytes of the head as its commit encodes it (to_json in canonical JSON)."""
        return len(canonical_json(self.to_json()))

    def seal_pays(self, grown: "ThreadHead", budget: int) -> bool:
        """Whether sealing this head's tail before the change that made `grown` of it
        lets the head fit in `budget` bytes where `grown` does not. The sealed head is
        estimated (its URI not known until the segment is stored: this head's last one
        stands in) and grows by what the change added: a tail whose newest item alone
        passes the budget is not sealed at every step for nothing. A budget of 0 (no
        head travels inline) never pays."""
        if budget <= 0 or not self.items:
            return False
        size = grown.encoded_size()
        if size <= budget:
            return False
        sealed = self.copy_as(self.thread_id)
        sealed.sealed_into(self.sealed or "x" * SEGMENT_URI_ALLOWANCE)
        return sealed.encoded_size() + size - self.encoded_size() <= budget

    def segment(self) -> dict[str, Any]:
        """The tail as a segment's JSON, pointing to the segment sealed before it."""
        return {"format": FORMAT, "items": self.items, "values": _used(self.items, self.values),
                "prev": self.sealed, "prev_max": self.sealed_max}

    def sealed_into(self, uri: str) -> None:
        """The tail is stored as segment `uri`: start a new tail. The references of each
        namespace's latest checkpoint stay, as the next step sees most of them again."""
        ids = [item["id"] for item in self.items if is_checkpoint(item)]
        if self.sealed_max is not None:
            ids.append(self.sealed_max)
        latest: dict[str, dict[str, Any]] = {}
        for item in self.items:
            if is_checkpoint(item) and item["id"] >= latest.get(item["ns"], {}).get("id", ""):
                latest[item["ns"]] = item
        self.values = _used(latest.values(), self.values)
        self.items, self.sealed, self.sealed_max = [], uri, max(ids) if ids else None

    # ---- writes to the head ----------------------------------------------------------------
    def add(self, stored: StoredCheckpoint) -> None:
        """Append a checkpoint (replacing one of the same id in the tail)."""
        refs = self.values.setdefault(stored.checkpoint_ns, {})
        for ch, ref in stored.refs.items():
            refs.setdefault(ch, {})[stored.versions[ch]] = ref
        item = entry(stored.checkpoint_ns, stored.checkpoint_id, stored.checkpoint, stored.metadata,
                     stored.parent_id, stored.versions, stored.writes)
        at = self._in_tail(_key(item), checkpoints_only=True)
        if at is None:
            self.items.append(item)
        else:
            self.items[at] = item

    def put(self, ns: str, checkpoint_id: str, checkpoint: Typed, metadata: Typed, parent_id: str | None,
            versions: Mapping[str, str], new_refs: Mapping[str, tuple[str, Ref]], fetch: Fetch) -> None:
        """`versions`: channel -> version key of every channel the checkpoint sees;
        `new_refs`: channel -> (version key, ref) of the values the step changed. A
        version never stored reads as empty, as LangGraph's own savers read it. A
        checkpoint stored again keeps the pending writes it had."""
        known = self.values.setdefault(ns, {})
        for ch, (key, ref) in new_refs.items():
            known.setdefault(ch, {})[key] = ref
        refs = {ch: self._ref(ns, ch, key, fetch) for ch, key in versions.items()}
        at = self._in_tail((ns, checkpoint_id), checkpoints_only=True)
        if at is not None:
            writes = list(self.items[at]["w"])
        elif self.sealed_max is not None and checkpoint_id <= self.sealed_max:
            before = self.find(ns, checkpoint_id, fetch)
            writes = list(before.writes) if before else []
        else:
            writes = []
        self.add(StoredCheckpoint(ns, checkpoint_id, checkpoint, metadata, parent_id, dict(versions), refs, writes))

    def put_writes(self, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   writes: list[tuple[int, str, Typed]], fetch: Fetch) -> bool:
        """Returns whether anything changed. Writes to a checkpoint in the tail join it;
        writes to a sealed one go into a patch in the tail."""
        at = self._in_tail((ns, checkpoint_id))
        if at is not None and is_checkpoint(self.items[at]):
            merged = list(self.items[at]["w"])
            if not merge_writes(merged, task_id, task_path, writes):
                return False
            self.items[at] = {**self.items[at], "w": merged}
            return True
        current = self.find(ns, checkpoint_id, fetch)
        known = list(current.writes if current else self.items[at]["w"] if at is not None else [])
        if not merge_writes(known, task_id, task_path, writes):
            return False
        patch = list(self.items[at]["w"]) if at is not None else []
        merge_writes(patch, task_id, task_path, writes)
        item = {"ns": ns, "id": checkpoint_id, "w": patch}
        if at is None:
            self.items.append(item)
        else:
            self.items[at] = item
        return True

    def _in_tail(self, key: tuple[str, str], *, checkpoints_only: bool = False) -> int | None:
        for i in range(len(self.items) - 1, -1, -1):
            if _key(self.items[i]) == key and (is_checkpoint(self.items[i]) or not checkpoints_only):
                return i
        return None

    def _ref(self, ns: str, ch: str, key: str, fetch: Fetch) -> Ref:
        """Where a value is: the tail knows the versions of recent steps; an older one
        (a step on top of an old checkpoint) is looked up in the segments."""
        for _, values, _ in self.layers(fetch):
            refs = values.get(ns, {}).get(ch, {})
            if key in refs:
                return refs[key]
        return None

    # ---- reads ---------------------------------------------------------------------------
    def layers(self, fetch: Fetch) -> Iterator[tuple[Sequence[Mapping[str, Any]], Values, str | None]]:
        """(items, values, greatest checkpoint id of the older layers), newest layer first."""
        yield self.items, self.values, self.sealed_max
        uri = self.sealed
        while uri is not None:
            segment = fetch(uri)
            yield segment["items"], segment["values"], segment["prev_max"]
            uri = segment["prev"]

    def newest_first(self, fetch: Fetch, ns: str | None = None, checkpoint_id: str | None = None,
                     before: str | None = None) -> Iterator[StoredCheckpoint]:
        """The thread's checkpoints in namespace `ns` (None: all), greatest id first,
        their writes patched; reads a segment only when the caller asks for more."""
        patches: dict[tuple[str, str], list[list[Any]]] = {}  # newest first
        seen: set[tuple[str, str]] = set()  # a checkpoint stored again shadows its older copies
        ready: list[StoredCheckpoint] = []
        for items, values, older_max in self.layers(fetch):
            for item in reversed(items):
                key = _key(item)
                if key in seen:
                    continue
                if not is_checkpoint(item):
                    patches.setdefault(key, []).append(item["w"])
                    continue
                seen.add(key)
                if ((ns is None or item["ns"] == ns) and (checkpoint_id is None or item["id"] == checkpoint_id)
                        and (before is None or item["id"] < before)):
                    ready.append(stored_from(item, values, patched(item["w"], reversed(patches.get(key, [])))))
            ready.sort(key=lambda s: (s.checkpoint_id, s.checkpoint_ns), reverse=True)
            while ready and (older_max is None or ready[0].checkpoint_id > older_max):
                yield ready.pop(0)
            if older_max is None or (checkpoint_id is not None and checkpoint_id > older_max):
                break
        yield from ready

    def find(self, ns: str, checkpoint_id: str | None, fetch: Fetch) -> StoredCheckpoint | None:
        """Checkpoint `checkpoint_id` of namespace `ns` (None: its latest)."""
        return next(self.newest_first(fetch, ns, checkpoint_id), None)

    @property
    def tail_namespaces(self) -> set[str]:
        return {item["ns"] for item in self.items if is_checkpoint(item)}


Namespaces = tuple[str, frozenset[str]]  # a sealed chain's newest segment, and the namespaces of its checkpoints


def sealed_namespaces(head: ThreadHead, fetch: Fetch, known: Namespaces | None) -> Namespaces | None:
    """The namespaces of the head's sealed chain (None: nothing sealed). `known` is an
    earlier answer for the same thread: only the segments sealed since are read, so a
    lookup of a namespace the thread never wrote (LangGraph asks for each new subgraph's)
    does not walk the whole chain."""
    if head.sealed is None:
        return None
    newer, uri = [], head.sealed
    while uri is not None and (known is None or uri != known[0]):
        segment = fetch(uri)
        newer.append(segment)
        uri = segment["prev"]
    base = known[1] if known is not None and uri is not None else frozenset()
    return head.sealed, base.union(item["ns"] for segment in newer for item in segment["items"]
                                   if is_checkpoint(item))


def rebuild(thread_id: str, checkpoints: Iterable[StoredCheckpoint], upload: Callable[[dict[str, Any]], str], *,
            seal_after: int = SEAL_AFTER) -> ThreadHead:
    """A new chain holding `checkpoints` (oldest first, writes already patched): what
    deleting some of a thread's checkpoints writes."""
    head = ThreadHead(thread_id, seal_after=seal_after)
    for stored in checkpoints:
        if head.seal_due:
            head.sealed_into(upload(head.segment()))
        head.add(stored)
    return head
