"""A checkpoint held inline is in the replicated record: the commit's Raft entry
carries the state, the store keeps it across a restart, and a snapshot installs it on
a replica that never saw the entry."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.replication import snapshots
from coordinator.core.commands import decode_result
from coordinator.replication.applier import apply_entry_bytes
from coordinator.storage.lmdb_store import LmdbStore
from coordinator.storage.state import KvState, RecordCache
from tests.replication.test_applier import group_entry, raft_entry
from tests.replication.test_snapshots import KEY, SELF, raft_data

# Larger than any blob URI may be, so only a data URI can name it.
STATE = bytes(range(256)) * 16
STATE_URI_PREFIX = "data:application/octet-stream;base64,"


def data_uri(data: bytes) -> str:
    """An RFC 2397 data URI as any client may write it (no sha256 parameter)."""
    return STATE_URI_PREFIX + base64.b64encode(data).decode()


def commit_inline(rid: str) -> log_pb2.LogEntry:
    digest = hashlib.sha256(STATE).hexdigest()
    return log_pb2.LogEntry(request_id=rid, commit_checkpoint=pb.CommitCheckpointRequest(
        token=pb.FencingToken(secret=b"s" * 16, incarnation=1), checkpoint=pb.CheckpointMeta(
            group="g", agent_id="a", index=1, kind=pb.BASIC, blob_uri=data_uri(STATE),
            sha256=digest, size=len(STATE))))


def held_state(store: object) -> bytes | None:
    checkpoint = KvState(store).checkpoint("g", "a", 1)  # type: ignore[arg-type]
    return None if checkpoint is None else base64.b64decode(checkpoint.blob_uri.partition(",")[2])


def test_an_inline_state_survives_a_restart_and_travels_in_a_snapshot(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "db")
    records = RecordCache(store)
    entries = [raft_entry(1000.0, group_entry("cg", "g", 1000.0)),
               raft_entry(1000.0, log_pb2.LogEntry(request_id="reg", register=pb.RegisterRequest(
                   secret=b"s" * 16, group="g", agent_id="a"))),
               raft_entry(1000.0, commit_inline("cp"))]
    for index, entry in enumerate(entries, 1):
        apply_entry_bytes(records, entry)
        records.commit(index)
    store.close()
    reopened = LmdbStore(tmp_path / "db")
    assert held_state(reopened) == STATE, "the restarted store does not hold the committed state"
    path = str(tmp_path / "raft.snapshot")
    snapshots.write(path, raft_data(SELF), reopened, KEY)
    installed = LmdbStore(tmp_path / "follower")
    with snapshots.open_received(path, SELF, KEY) as received:
        installed.load_image(received.image, received.header.image_len)
    assert held_state(installed) == STATE, "the installed snapshot does not hold the committed state"
    reopened.close()
    installed.close()


def test_the_remembered_answer_of_an_inline_commit_leaves_out_its_state_and_a_retry_gets_it_whole(
        tmp_path: Path) -> None:
    """The dedupe table keeps each answer for the whole window: with the state in it, a
    4 KiB checkpoint would be stored a second time per commit. The retry carries the same
    data URI (its fingerprint must match), so its answer is whole all the same."""
    store = LmdbStore(tmp_path / "db")
    records = RecordCache(store)
    for index, entry in enumerate([group_entry("cg", "g", 1000.0), log_pb2.LogEntry(
            request_id="reg", register=pb.RegisterRequest(secret=b"s" * 16, group="g", agent_id="a")),
            commit_inline("cp")], 1):
        first = apply_entry_bytes(records, raft_entry(1000.0, entry))
        records.commit(index)
    kept_sizes = {key: len(raw) for key, raw in store.scan(b"") if b"CheckpointResult" in raw}
    assert kept_sizes and max(kept_sizes.values()) < 1024, f"remembered answers of {kept_sizes} bytes"
    retried = apply_entry_bytes(records, raft_entry(1001.0, commit_inline("cp")))
    assert decode_result(retried) == decode_result(first), (decode_result(retried), decode_result(first))
    assert held_state(store) == STATE
    store.close()


def test_the_record_cache_reads_an_inline_checkpoint_from_the_store_instead_of_keeping_it(tmp_path: Path) -> None:
    """The cache is bounded by its count of records: 200,000 inline checkpoints kept
    decoded would be gigabytes. Read back, the record is whole all the same."""
    store = LmdbStore(tmp_path / "db")
    records = RecordCache(store)
    for index, entry in enumerate([group_entry("cg", "g", 1000.0), log_pb2.LogEntry(
            request_id="reg", register=pb.RegisterRequest(secret=b"s" * 16, group="g", agent_id="a")),
            commit_inline("cp")], 1):
        apply_entry_bytes(records, raft_entry(1000.0, entry))
        records.commit(index)
    assert held_state(records) == STATE
    cached = [value for value in records._clean.values() if STATE_URI_PREFIX in str(value)]
    assert cached == [], f"the cache keeps {len(cached)} records holding the inline state"
    store.close()
