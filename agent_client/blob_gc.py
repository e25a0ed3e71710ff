"""Garbage collection end to end: ask the coordinator which checkpoints it released,
then delete their blobs (what `raftpoint gc` and `raftpoint group delete` run;
callable from an operator's job).

Several blob stores may hold one group's checkpoints (LangGraph savers of one group,
each with its own store): a collection releases only the checkpoints of the store it
runs against, so it never leaves another store's files without a record.

The coordinator forgets a checkpoint the moment it answers GarbageCollect, so the
blob store is checked first (an unreachable store fails before anything is released)
and every failure afterwards reports the released URIs, which can then be deleted
with `delete_checkpoints` (or `raftpoint gc --uri`) once the store is back.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from agent_client.blobs.errors import BlobError
from agent_client.blobs.gc import DEFAULT_GRACE_S, GcResult
from agent_client.blobs.layout import MANIFESTS
from agent_client.blobs.store import LocalBlobStore
from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb


class ReleasedButNotDeleted(BlobError):
    """The coordinator released checkpoints whose blobs could not all be deleted."""

    def __init__(self, message: str, uris: Sequence[str]) -> None:
        super().__init__(message)
        self.uris = list(uris)


@dataclass(frozen=True)
class GcReport:
    released: dict[str, list[str]] = field(default_factory=dict)  # group -> manifest URIs the coordinator released
    foreign: list[str] = field(default_factory=list)  # released URIs that are not in this blob store
    result: GcResult = GcResult(0, 0, 0)


def manifests_prefix(store: LocalBlobStore) -> str:
    """The URI prefix of the store's checkpoints: what the coordinator is told to collect
    only (GarbageCollectRequest.blob_store)."""
    return store.backend.uri(MANIFESTS) + "/"


def release(conn: Connection, groups: Sequence[str], blob_store: str = "") -> dict[str, list[str]]:
    """One GarbageCollect per group: the URIs of the checkpoints the coordinator dropped,
    only those under the `blob_store` prefix if one is given."""
    released: dict[str, list[str]] = {}
    for group in groups:
        resp = conn.call("AdminService", "GarbageCollect",
                         pb.GarbageCollectRequest(request_id=f"gc-{group}-{uuid.uuid4().hex}", group=group,
                                                  blob_store=blob_store))
        released[group] = list(resp.deletable_blob_uris)
    return released


def delete_group(conn: Connection, group: str) -> list[str]:
    """Delete a finished group on the coordinator: the URIs of every checkpoint it held."""
    resp = conn.call("AdminService", "DeleteGroup",
                     pb.DeleteGroupRequest(request_id=f"delete-{group}-{uuid.uuid4().hex}", group=group))
    return list(resp.deletable_blob_uris)


def collect(conn: Connection, store: LocalBlobStore, groups: Sequence[str], *,
            grace_s: float = DEFAULT_GRACE_S) -> GcReport:
    """Release the groups' old checkpoints held in `store` (those of other stores stay
    recorded for a collection against their store), delete their manifests, then every
    chunk no remaining manifest references and that is older than `grace_s`."""
    return delete_released(store, lambda: release(conn, groups, manifests_prefix(store)), grace_s)


def delete_released(store: LocalBlobStore, released_by: Callable[[], dict[str, list[str]]],
                    grace_s: float = DEFAULT_GRACE_S) -> GcReport:
    """Run `released_by` (it has the coordinator release checkpoints: group -> URIs),
    then delete those checkpoints' blobs from `store` as `collect` does."""
    next(iter(store.backend.keys(MANIFESTS)), None)  # reachable? (raises BlobStoreUnavailable)
    released = released_by()
    uris = [u for group_uris in released.values() for u in group_uris]
    ours = [u for u in uris if store.holds(u)]
    try:
        result = store.delete_checkpoints(ours, grace_s=grace_s)
    except BlobError as exc:
        raise ReleasedButNotDeleted(f"{exc}; the coordinator released {len(ours)} checkpoints whose blobs are "
                                    "still stored: delete them once the store is back", ours) from exc
    return GcReport(released, [u for u in uris if u not in ours], result)
