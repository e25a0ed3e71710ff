"""agent_client.group_fork against a scripted coordinator: a refused fork deletes the
copies it made, so does one whose copying fails half way, one whose outcome is
unknown keeps them and names them, and a checkpoint in another blob store is refused
before anything is written."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from agent_client import group_fork
from agent_client.blobs.layout import MANIFESTS
from agent_client.blobstore import BlobMissing, LocalBlobStore
from agent_client.connection import CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb


class Scripted:
    """Answers the reads a fork makes; ForkGroup raises `fork_raises`."""

    def __init__(self, metas: list[pb.CheckpointMeta], fork_raises: Exception) -> None:
        self.metas = metas
        self.fork_raises = fork_raises
        self.forks: list[pb.ForkGroupRequest] = []

    def call(self, service: str, method: str, request: Any) -> Any:
        if method == "ListSavepoints":
            return pb.ListSavepointsResponse(savepoints=[pb.Savepoint(group="g", name="s", checkpoints=[
                pb.SavedCheckpoint(agent_id=m.agent_id, index=m.index) for m in self.metas])])
        if method == "ListCheckpoints":
            return pb.ListCheckpointsResponse(checkpoints=[m for m in self.metas if m.agent_id == request.agent_id])
        assert method == "ForkGroup", method
        self.forks.append(request)
        raise self.fork_raises


def _store(root: Path) -> LocalBlobStore:
    """A store that writes every state as a blob: what a fork copies."""
    return LocalBlobStore(root, inline_max_bytes=0)


def _saved(store: LocalBlobStore) -> list[pb.CheckpointMeta]:
    return [pb.CheckpointMeta(group="g", agent_id=agent, index=2, blob_uri=store.put(agent.encode() * 1000).uri)
            for agent in ("a", "b")]


def _manifests(store: LocalBlobStore) -> set[str]:
    return set(store.backend.keys(MANIFESTS))


def test_a_refused_fork_deletes_its_copies(tmp_path: Path) -> None:
    store = _store(tmp_path)
    conn = Scripted(_saved(store), Rejected(grpc.StatusCode.ALREADY_EXISTS, "exists", pb.REASON_GROUP_EXISTS))
    before = _manifests(store)
    with pytest.raises(Rejected):
        group_fork.fork(conn, store, "g", "s", "f")
    [sent] = conn.forks
    assert len(sent.copies) == 2 and _manifests(store) == before


def test_a_fork_of_unknown_outcome_keeps_its_copies_and_names_them(tmp_path: Path) -> None:
    store = _store(tmp_path)
    conn = Scripted(_saved(store), CoordinatorUnavailable("no leader"))
    with pytest.raises(group_fork.OutcomeUnknown) as info:
        group_fork.fork(conn, store, "g", "s", "f", request_id="fork-1")
    [sent] = conn.forks
    assert info.value.request_id == "fork-1" and info.value.uris == [c.blob_uri for c in sent.copies]
    assert [store.get(uri) for uri in info.value.uris] == [b"a" * 1000, b"b" * 1000]


def test_a_fork_of_unknown_outcome_names_no_state_held_inline(tmp_path: Path) -> None:
    """A data: URI is its own copy: the fork shares it, and only stored copies are named."""
    store = LocalBlobStore(tmp_path, inline_max_bytes=1000)
    metas = [pb.CheckpointMeta(group="g", agent_id=agent, index=2, blob_uri=store.put(agent.encode() * size).uri)
             for agent, size in (("a", 1000), ("b", 1001))]
    conn = Scripted(metas, CoordinatorUnavailable("no leader"))
    with pytest.raises(group_fork.OutcomeUnknown) as info:
        group_fork.fork(conn, store, "g", "s", "f")
    [sent] = conn.forks
    assert sent.copies[0].blob_uri == metas[0].blob_uri and metas[0].blob_uri.startswith("data:")
    assert info.value.uris == [sent.copies[1].blob_uri] != [metas[1].blob_uri], info.value.uris


def test_a_checkpoint_in_another_store_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = _store(tmp_path / "here")
    metas = _saved(store) + _saved(_store(tmp_path / "elsewhere"))[:1]
    metas[-1].agent_id = "c"
    conn = Scripted(metas, AssertionError("not to be proposed"))
    before = _manifests(store)
    with pytest.raises(group_fork.NotInStore, match="checkpoint 2 of 'c' is not in"):
        group_fork.fork(conn, store, "g", "s", "f")
    assert not conn.forks and _manifests(store) == before


def test_a_copy_that_fails_half_way_deletes_the_copies_made(tmp_path: Path) -> None:
    store = _store(tmp_path)
    metas = _saved(store)
    store.delete(metas[1].blob_uri)  # its savepoint deleted and collected meanwhile
    conn = Scripted(metas, AssertionError("not to be proposed"))
    before = _manifests(store)
    with pytest.raises(BlobMissing):
        group_fork.fork(conn, store, "g", "s", "f")
    assert not conn.forks and _manifests(store) == before
