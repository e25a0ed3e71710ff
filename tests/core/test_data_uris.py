"""Checkpoints held inline (data: URIs) in the pure core: accepted up to the cap when
their bytes are the committed state, refused clearly otherwise with nothing changed,
never listed for deletion, released by any store's collection, forked as they are."""
from __future__ import annotations

import hashlib

import pytest

from coordinator.core import commands as c
from coordinator.core import data_uris
from coordinator.core.errors import Code
from coordinator.core.model import Checkpoint, CheckpointKind, GroupSpec, Mode
from tests.core.test_state_machine import Machine

URI = "checkpoint.blob_uri"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def inline(agent: str, index: int, data: bytes, *, uri: str | None = None, digest: str | None = None,
           size: int | None = None) -> c.CommitCheckpoint:
    """A commit of `data` held inline (its URI, digest and size overridable to lie)."""
    digest = sha(data) if digest is None else digest
    cp = Checkpoint("g", agent, index, 0, CheckpointKind.BASIC, data_uris.encode(data, digest) if uri is None else uri,
                    digest, len(data) if size is None else size)
    return c.CommitCheckpoint(c.Token(1, 0), cp)


@pytest.fixture
def m() -> Machine:
    return Machine().with_group(GroupSpec("g", Mode.CIC_BCS, retention=1), "a")


def test_a_state_up_to_the_cap_is_held_in_its_record(m: Machine) -> None:
    data = bytes(range(256)) * (data_uris.MAX_INLINE_BYTES // 256)
    committed = m.ok(inline("a", 1, data)).checkpoint
    assert len(committed.blob_uri) > 10_000 and data_uris.decode(committed.blob_uri).data == data
    assert m.state.checkpoint("g", "a", 1).blob_uri == committed.blob_uri


@pytest.mark.parametrize("commit, says", [
    (inline("a", 1, b"the state", digest=sha(b"another state")), "holds bytes whose SHA-256 is"),
    (inline("a", 1, b"the state", size=10), "holds 9 bytes, not the checkpoint's size 10"),
    (inline("a", 1, b"x" * (data_uris.MAX_INLINE_BYTES + 1)), "holds 8193 bytes: a data URI holds at most 8192"),
    (inline("a", 1, b"x" * 9000), "a data URI holds at most 8192 bytes"),  # refused before decoding
    (inline("a", 1, b"the state", uri="data:application/octet-stream;base64,not*base64"), "not valid base64"),
    (inline("a", 1, b"the state", uri="data:text/plain,the%20state"), "base64"),
    (inline("a", 1, b"the state", uri="data:;sha256=" + "0" * 64 + ";base64,dGhlIHN0YXRl"),
     "sha256 parameter"),
    (inline("a", 1, b"the state", uri="data:;oops;base64,dGhlIHN0YXRl"), "not name=value"),
    (inline("a", 1, b"the state", uri="data:text/\x00;base64,dGhlIHN0YXRl"), "printable ASCII"),
])
def test_a_data_uri_that_is_not_the_committed_state_is_refused_and_changes_nothing(
        m: Machine, commit: c.CommitCheckpoint, says: str) -> None:
    refused = m.fail(commit, Code.INVALID_ARGUMENT, URI)  # fail() checks the state is unchanged
    assert says in refused.reason, refused.reason


def test_gc_lists_no_inline_checkpoint_for_deletion_and_any_store_releases_them(m: Machine) -> None:
    for index in (1, 2, 3):
        m.ok(inline("a", index, b"state %d" % index))
    m.ok(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 4, 0, CheckpointKind.BASIC,
                                                      "file:///store/manifests/4.json", "ab" * 32, 100)))
    result = m.ok(c.GarbageCollect("g", blob_store="s3://bucket/other/manifests/"))
    assert result.deletable_blob_uris == () and result.checkpoints_deleted == 2, result
    assert [cp.index for cp in m.state.checkpoints("g", "a")] == [3, 4]


def test_a_group_deleted_lists_only_its_blobs(m: Machine) -> None:
    m.ok(inline("a", 1, b"state"))
    m.ok(c.CommitCheckpoint(c.Token(1, 0), Checkpoint("g", "a", 2, 0, CheckpointKind.BASIC,
                                                      "file:///store/manifests/2.json", "ab" * 32, 100)))
    m.ok(c.Deregister("g", "a", c.Token(1, 0)))
    result = m.ok(c.DeleteGroup("g"))
    assert result.deletable_blob_uris == ("file:///store/manifests/2.json",) and result.checkpoints_deleted == 2


def test_a_fork_holds_an_inline_checkpoint_as_it_is_and_refuses_other_bytes(m: Machine) -> None:
    held = m.ok(inline("a", 1, b"saved state")).checkpoint
    m.ok(c.CreateSavepoint("g", "s"))
    other = data_uris.encode(b"other state", held.sha256)
    refused = m.fail(c.ForkGroup("g", "s", "f", (c.ForkedCheckpoint("a", 1, other),)), Code.INVALID_ARGUMENT,
                     "copies[0].blob_uri")
    assert "holds bytes whose SHA-256 is" in refused.reason, refused.reason
    m.ok(c.ForkGroup("g", "s", "f", (c.ForkedCheckpoint("a", 1, held.blob_uri),)))
    assert m.state.checkpoint("f", "a", 1).blob_uri == held.blob_uri


def test_listings_show_a_data_uri_by_its_size() -> None:
    assert data_uris.shown_uri(data_uris.encode(b"x" * 1000, "0" * 64)) == "data: (1000 bytes inline)"
    assert data_uris.shown_uri(data_uris.encode(b"x" * 1001, "0" * 64)) == "data: (1001 bytes inline)"
    assert data_uris.shown_uri("file:///b/1") == "file:///b/1"
