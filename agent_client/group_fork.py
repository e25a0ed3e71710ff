"""Forking a group end to end: copy the manifests of a savepoint's checkpoints, then
have the coordinator create the fork reading from the copies (what `raftpoint restore
G --savepoint S --into NEW` runs; callable from an operator's job).

Each group names only manifests of its own, so a collection of either (which deletes
the manifests the coordinator released, then the chunks no remaining manifest names)
never takes the other's state; the chunks themselves are shared.

The copies are made before the fork is proposed: a savepoint pins its checkpoints, so
their manifests are there to copy, and once the fork exists its copies are in the
store. A refused fork deletes its copies (named by its request id, nothing else
reads them); one whose outcome is unknown keeps them, for the fork may exist.
"""
from __future__ import annotations

import logging
import uuid
from typing import Sequence

import grpc

from agent_client.blobs.errors import BlobError
from agent_client.blobs.store import LocalBlobStore
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.pages import every_page
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger("agent_client")

class NotInStore(BlobError):
    """A checkpoint of the savepoint is not in the blob store the fork copies in."""


class OutcomeUnknown(Exception):
    """The coordinator did not say whether it created the fork. Its copies are kept (the
    fork may read from them): a retry with `request_id` makes neither twice; if the
    fork does not exist, nothing references `uris`."""

    def __init__(self, message: str, request_id: str, uris: list[str]) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.uris = uris


def held_checkpoints(conn: Connection, group: str, savepoint: str, agents: Sequence[str] = ()
                     ) -> list[pb.CheckpointMeta]:
    """The checkpoints `savepoint` of `group` holds (of `agents` only, if named), by agent
    id (an agent it holds at its initial state has none); Rejected with
    REASON_SAVEPOINT_NOT_FOUND, as the fork itself would be, when there is no such savepoint."""
    _, savepoints = every_page(conn, "ListSavepoints", pb.ListSavepointsRequest(group=group), "savepoints")
    found = next((s for s in savepoints if s.name == savepoint), None)
    if found is None:
        raise Rejected(grpc.StatusCode.NOT_FOUND, f"savepoint {savepoint!r} of group {group!r} does not exist",
                       pb.REASON_SAVEPOINT_NOT_FOUND)
    held: list[pb.CheckpointMeta] = []
    for saved in sorted(found.checkpoints, key=lambda s: s.agent_id):
        if saved.index and (not agents or saved.agent_id in agents):
            request = pb.ListCheckpointsRequest(group=group, agent_id=saved.agent_id)
            _, metas = every_page(conn, "ListCheckpoints", request, "checkpoints")
            held.extend(m for m in metas if m.index == saved.index)
    return held


def held_in_store(conn: Connection, store: LocalBlobStore, group: str, savepoint: str,
                  agents: Sequence[str] = ()) -> list[pb.CheckpointMeta]:
    """held_checkpoints, or NotInStore when one of them is not in `store`."""
    held = held_checkpoints(conn, group, savepoint, agents)
    elsewhere = [m for m in held if not store.holds(m.blob_uri)]
    if elsewhere:
        raise NotInStore(f"checkpoint {elsewhere[0].index} of {elsewhere[0].agent_id!r} is not in "
                         f"{store.backend.location} ({elsewhere[0].blob_uri}): a fork copies every checkpoint of the "
                         "savepoint in the one blob store given")
    return held


def fork(conn: Connection, store: LocalBlobStore, group: str, savepoint: str, into: str, *,
         agents: Sequence[str] = (), request_id: str = "") -> pb.ForkGroupResponse:
    """Create group `into` from `savepoint` of `group` (its `agents` only, if named), the
    manifests of its checkpoints copied in `store` (NotInStore, before anything is
    written, if one is elsewhere). Rejected as the coordinator refuses it (its copies
    deleted); OutcomeUnknown when it did not answer."""
    request_id = request_id or f"fork-{uuid.uuid4().hex}"
    held = held_in_store(conn, store, group, savepoint, agents)
    copies: list[pb.ForkedCheckpoint] = []
    try:
        for m in held:
            copies.append(pb.ForkedCheckpoint(agent_id=m.agent_id, index=m.index,
                                              blob_uri=store.copy_manifest(m.blob_uri, f"fork {into} {request_id}")))
    except BlobError:
        _delete(store, copies)
        raise
    # A state held inline is its own copy: only stored copies are this request's to name.
    made = [copy.blob_uri for copy, source in zip(copies, held) if copy.blob_uri != source.blob_uri]
    try:
        return conn.call("AdminService", "ForkGroup", pb.ForkGroupRequest(
            request_id=request_id, group=group, savepoint=savepoint, into=into, copies=copies, agents=agents))
    except CoordinatorUnavailable as exc:
        raise OutcomeUnknown(str(exc), request_id, made) from exc
    except Rejected as exc:
        if exc.reason_code == pb.REASON_REQUEST_TOO_OLD:
            raise OutcomeUnknown(str(exc), request_id, made) from exc
        _delete(store, copies)
        raise


def _delete(store: LocalBlobStore, copies: list[pb.ForkedCheckpoint]) -> None:
    """Copies no fork reads from: they are this request's own, nothing else names them."""
    for copy in copies:
        store.delete(copy.blob_uri)


def fork_now(conn: Connection, store: LocalBlobStore, group: str, into: str, agents: Sequence[str]
             ) -> pb.ForkGroupResponse:
    """Fork `agents` of `group` as they are now into `into`: a savepoint of the group is
    taken, the agents are forked from it together, and it is deleted again (its
    checkpoints stay pinned only while the fork is made: the fork reads from copies)."""
    savepoint = f"fork-{uuid.uuid4().hex[:16]}"
    conn.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
        request_id=f"sp-{savepoint}", group=group, name=savepoint, labels={"fork_into": into}))
    try:
        return fork(conn, store, group, savepoint, into, agents=agents)
    finally:
        try:
            conn.call("AdminService", "DeleteSavepoint", pb.DeleteSavepointRequest(
                request_id=f"dsp-{savepoint}", group=group, name=savepoint))
        except (CoordinatorUnavailable, Rejected) as exc:
            # Left, it only keeps its checkpoints from collection: the fork does not need it.
            log.warning("savepoint %s of group %s, taken to fork into %s, was not deleted: %s; delete it with "
                        "raftpoint savepoint delete", savepoint, group, into, exc)
