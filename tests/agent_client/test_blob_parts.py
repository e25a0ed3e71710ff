"""A state put in parts (checkpoint_blob.pack_parts): stored exactly as pack() joins
them, never joined on the way into the store, and chunked part by part so a changed
client section in front leaves the state's chunks as they were."""
from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from agent_client.agent import AgentClient
from agent_client.blobs import digests
from agent_client.blobs.digests import PREFIX_STEP
from agent_client.blobstore import LocalBlobStore, PutResult
from agent_client.checkpoint_blob import pack, pack_parts, unpack
from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from tests.agent_client.test_blob_hashing import MIB, HashedBytes, assert_digests_true, change_one_percent, state

SCHEMA = 3


def client_section(clock: int) -> dict[str, Any]:
    """A client section whose length grows with `clock`, as a protocol clock's does."""
    return {"rule": {"clock": clock}, "sent": clock, "seq": {"b": clock}}


@pytest.mark.parametrize("value", [state(3 * MIB, seed=20), {"n": 7, "items": list(range(1000))}, b""],
                         ids=["bytes", "json", "empty"])
def test_the_parts_are_stored_as_pack_joins_them(tmp_path: Path, value: Any) -> None:
    client = client_section(5)
    put = LocalBlobStore(tmp_path).put(pack_parts(client, value, schema_version=SCHEMA))
    joined = pack(client, value, schema_version=SCHEMA)
    stored = LocalBlobStore(tmp_path).get(put.uri)
    assert stored == joined, f"stored {len(stored)} bytes, pack() gives {len(joined)}"
    assert (put.sha256, put.size) == (hashlib.sha256(joined).hexdigest(), len(joined))
    assert unpack(stored, expected_schema=SCHEMA) == (client, value)


@pytest.mark.parametrize("cuts", [[0], [5], [PREFIX_STEP], [PREFIX_STEP - 1, PREFIX_STEP + 1, 3 * PREFIX_STEP],
                                  [10, 10, 2 * PREFIX_STEP + 7]])
def test_the_whole_hash_over_parts_is_the_hash_of_their_join(cuts: list[int]) -> None:
    """The running states are kept at the same places of the whole wherever the parts
    end, so a later put resumes from them as from a single buffer's."""
    data = state(3 * PREFIX_STEP + 100, seed=21)
    bounds = [0, *cuts, len(data)]
    parts = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    whole, joined = digests.state_digest(parts), digests.state_digest([data])
    assert whole.sha256 == joined.sha256 == hashlib.sha256(data).hexdigest()
    assert [h.hexdigest() for h in whole.prefixes] == [h.hexdigest() for h in joined.prefixes]
    resumed = digests.state_digest(parts, joined.prefixes[:3])
    assert resumed.sha256 == joined.sha256


def test_the_state_is_not_copied_on_the_way_into_the_store(tmp_path: Path) -> None:
    """Neither pack_parts nor put allocates anything near the state's size."""
    value = state(16 * MIB, seed=22)
    store = LocalBlobStore(tmp_path)
    store.put(pack_parts(client_section(1), b"warm-up", schema_version=SCHEMA))  # starts the store's threads
    tracemalloc.start()
    try:
        parts = pack_parts(client_section(2), value, schema_version=SCHEMA)
        put = store.put(parts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(value) // 4, f"{peak} bytes allocated at the peak for a {len(value)}-byte state"
    assert parts[-1] is value, "the state's own buffer is not among the parts"
    assert put.size == len(pack(client_section(2), value, schema_version=SCHEMA))


def test_a_changed_client_section_leaves_the_states_chunks_unhashed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The client section in front grows, shifting every byte of the state in the
    joined blob; chunked apart, the 1%-changed state still hashes once (the whole
    blob's SHA-256) plus its changed chunks, and writes only those."""
    store = LocalBlobStore(tmp_path)
    value = state(4 * MIB, seed=23)
    hashed = HashedBytes(monkeypatch)  # from the first put on: the running states it keeps count too
    first = store.put(pack_parts(client_section(1), value, schema_version=SCHEMA))
    changed = change_one_percent(value, seed=24)
    hashed.total = 0
    put = store.put(pack_parts(client_section(10 ** 9), changed, schema_version=SCHEMA), parent=first.manifest)
    monkeypatch.undo()
    assert hashed.total < 1.2 * put.size, f"hashed {hashed.total} bytes for a {put.size}-byte blob"
    assert put.chunks_new < put.chunks_total / 5, f"{put.chunks_new} of {put.chunks_total} chunks written"
    assert_digests_true(store, put.uri, pack(client_section(10 ** 9), changed, schema_version=SCHEMA))


def test_an_unchanged_client_section_lets_the_whole_hash_resume_inside_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole hash resumes after every part equal to the last put's and the prefix
    the next one shares: a state changed near its end hashes little more than its tail."""
    store = LocalBlobStore(tmp_path)
    hashed = HashedBytes(monkeypatch)
    value = state(8 * MIB, seed=28)
    first = store.put(pack_parts(client_section(1), value, schema_version=SCHEMA))
    changed = value[:-MIB // 2] + state(MIB // 2, seed=29)
    hashed.total = 0
    put = store.put(pack_parts(client_section(1), changed, schema_version=SCHEMA), parent=first.manifest)
    monkeypatch.undo()
    assert hashed.total < 0.4 * put.size, f"hashed {hashed.total} bytes for a {put.size}-byte blob"
    assert_digests_true(store, put.uri, pack(client_section(1), changed, schema_version=SCHEMA))


def test_a_checkpoint_stored_whole_restores_and_lends_its_chunks(tmp_path: Path) -> None:
    """A blob stored as one buffer (as earlier versions stored every checkpoint, cut
    across the client section) reads back whole, and the next checkpoint in parts
    writes only what changed."""
    value = state(4 * MIB, seed=25)
    old = LocalBlobStore(tmp_path).put(pack(client_section(1), value, schema_version=SCHEMA))
    reader = LocalBlobStore(tmp_path)  # a restarted agent
    assert unpack(reader.get(old.uri), expected_schema=SCHEMA) == (client_section(1), value)
    changed = change_one_percent(value, seed=26)
    put = reader.put(pack_parts(client_section(2), changed, schema_version=SCHEMA), parent=reader.manifest(old.uri))
    assert put.chunks_new < put.chunks_total / 5, f"{put.chunks_new} of {put.chunks_total} chunks written"
    assert LocalBlobStore(tmp_path).get(put.uri) == pack(client_section(2), changed, schema_version=SCHEMA)


class RecordingStore(LocalBlobStore):
    """Remembers what each put was handed."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.handed: list[Any] = []

    def put(self, data: Any, **kw: Any) -> PutResult:
        self.handed.append(data)
        return super().put(data, **kw)


def test_an_agent_checkpoint_hands_the_store_its_state_uncopied(tmp_path: Path) -> None:
    value = state(2 * MIB, seed=27)
    store = RecordingStore(tmp_path / "blobs")
    with InProcessCoordinator() as coordinator:
        with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
            admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id="cg-g", spec=pb.GroupSpec(
                group="g", mode=pb.CIC_BCS, lease_ttl_s=30, checkpoint_interval_s=3600)))
        client = AgentClient("g", "a", [coordinator.address], store, tls=coordinator.client_tls(),
                             snapshot=dict, background=False, state_dir=tmp_path / "state")
        try:
            client.register()
            client.checkpoint(value)
        finally:
            client.close()
        handed = store.handed[-1]
        assert not isinstance(handed, (bytes, bytearray, memoryview)) and any(part is value for part in handed), (
            f"the store was handed {type(handed).__name__}, not parts holding the state")
        again = AgentClient("g", "a", [coordinator.address], LocalBlobStore(tmp_path / "blobs"),
                            tls=coordinator.client_tls(), snapshot=dict, background=False, state_dir=tmp_path / "state")
        try:
            again.register()
            assert again.restore().state == value
        finally:
            again.close()
