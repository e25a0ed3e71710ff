"""The blob store on a real S3 server (SeaweedFS on loopback), and the faults users meet."""
from __future__ import annotations

import contextlib
import random
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent_client.agent import AgentClient
from agent_client.blobs.layout import MANIFESTS, PACKS, pack_key
from agent_client.blobs.location import sub_location
from agent_client.blobs.s3 import S3Backend, shared_file_credentials
from agent_client.blobstore import BlobCorrupted, BlobMissing, BlobStoreUnavailable, LocalBlobStore, open_blob_store
from agent_client.connection import Connection
from agent_client.testing import InProcessCoordinator
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.s3_server import S3Server
from tests.support.s3 import FAST_FAILURE
from tests.support.s3_proxy import FaultProxy


def state(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def with_endpoint(url: str, endpoint: str) -> str:
    base, _, _ = url.partition("?")
    return f"{base}?endpoint={endpoint}&region=us-east-1&{FAST_FAILURE}"


def stored_keys(store: LocalBlobStore) -> set[str]:
    return set(store.backend.keys(MANIFESTS)) | set(store.backend.keys(PACKS))


def test_round_trip_through_a_second_client(s3_url: str) -> None:
    """What one machine writes, another (a new client on the same URL) restores."""
    writer = open_blob_store(s3_url)
    data = state(1_500_000)
    put = writer.put(data)
    assert put.uri.startswith("s3://checkpoints/t-") and "endpoint" not in put.uri
    assert put.chunks_new == put.chunks_total > 1
    reader = open_blob_store(s3_url)
    assert reader.get(put.uri) == data
    incremental = writer.put(data[:1000] + b"edit" + data[1004:], parent=put.manifest)
    assert incremental.chunks_new == 1 and reader.get(incremental.uri)[1000:1004] == b"edit"
    with pytest.raises(BlobMissing, match="not a manifest of this blob store"):
        reader.get(put.uri.replace("s3://checkpoints/", "s3://other-bucket/"))


def test_a_checkpoint_is_two_puts_and_restores_in_range_reads(s3_url: str) -> None:
    """The pack, then the manifest: two PUTs however many chunks are new, where there
    was one per chunk; restore reads the pack in ranges, each chunk verified."""
    store = open_blob_store(s3_url)
    created: list[str] = []
    real_create = store.backend.create

    def counting_create(key: str, data: object) -> bool:
        created.append(key)
        return real_create(key, data)  # type: ignore[arg-type]
    store.backend.create = counting_create  # type: ignore[method-assign]
    data = state(2_000_000, seed=12)
    put = store.put(data)
    assert put.chunks_new > 10 and [k.split("/")[0] for k in created] == [PACKS, MANIFESTS], created
    assert open_blob_store(s3_url).get(put.uri) == data


def test_a_small_state_makes_no_request_and_one_byte_more_is_stored(s3_url: str) -> None:
    """A state up to inline_max_bytes is its data: URI, which any client reads without
    the server; one byte more is a pack and a manifest as before."""
    store = open_blob_store(s3_url, inline_max_bytes=1000)
    requests: list[str] = []
    for name in ("create", "put", "get", "get_range", "exists", "keys", "delete"):
        real = getattr(store.backend, name)
        setattr(store.backend, name, lambda *a, _n=name, _real=real, **kw: requests.append(_n) or _real(*a, **kw))
    small = store.put(state(1000, seed=20))
    assert small.uri.startswith("data:") and requests == [], requests
    assert store.get(small.uri) == open_blob_store(s3_url).get(small.uri) == state(1000, seed=20)
    store.delete(store.copy_manifest(small.uri, "copy"))
    assert requests == [], requests
    over = store.put(state(1001, seed=21))
    assert over.uri.startswith("s3://") and "create" in requests and stored_keys(store), requests
    assert open_blob_store(s3_url).get(over.uri) == state(1001, seed=21)


def test_a_state_in_parts_is_one_pack_and_reads_back_joined(s3_url: str) -> None:
    """Parts are chunked apart but stored as one state: one pack, one manifest."""
    store = open_blob_store(s3_url)
    parts = [b"client section\n", state(1_200_000, seed=13)]
    put = store.put(parts)
    assert open_blob_store(s3_url).get(put.uri) == b"".join(parts)
    kinds = sorted(key.split("/")[0] for key in stored_keys(store))
    assert kinds == [MANIFESTS, PACKS], f"stored {kinds}"


def test_create_only_never_replaces_a_stored_pack(s3_url: str) -> None:
    store = open_blob_store(s3_url)
    data = state(200_000, seed=2)
    first = store.put(data)
    assert store.backend.create(pack_key(first.manifest.chunks[0].pack, None), b"other bytes") is False
    assert store.get(first.uri) == data
    again = open_blob_store(s3_url).put(data)  # a restarted writer knows no recent checkpoint: its own pack
    assert again.chunks_new == again.chunks_total and store.get(again.uri) == data


def test_tampered_object_is_rejected_on_read(s3_url: str) -> None:
    store = open_blob_store(s3_url)
    put = store.put(state(300_000, seed=3))
    ref = put.manifest.chunks[1]
    digest = ref.digest
    stored = bytearray(store.backend.get(ref.key(None)))
    stored[ref.offset + 10] ^= 1
    store.backend.put(ref.key(None), bytes(stored))
    with pytest.raises(BlobCorrupted, match=f"chunk {digest} of s3://.*#1.*does not match"):
        store.get(put.uri)


def test_encrypted_chunks_on_s3(s3_url: str) -> None:
    key = bytes(range(32))
    data = state(150_000, seed=4)
    put = open_blob_store(s3_url, key=key).put(data)
    raw = b"".join(open_blob_store(s3_url).backend.get(key) for key in {c.key(put.manifest.key_id)
                                                                        for c in put.manifest.chunks})
    assert len(raw) > len(data) and data[5000:5064] not in raw
    assert open_blob_store(s3_url, key=key).get(put.uri) == data


def test_damaged_upload_is_rejected_by_the_server(s3_server: S3Server, s3_url: str) -> None:
    """A body altered in transit fails the server's SHA-256 check instead of being stored."""
    proxy = FaultProxy(s3_server.endpoint)
    try:
        store = open_blob_store(with_endpoint(s3_url, proxy.endpoint))
        proxy.corrupt_next_put = True
        with pytest.raises(BlobStoreUnavailable,
                           match=r"blob store s3://checkpoints/t-.* at http://127.0.0.1.*\(BadDigest\)"):
            store.backend.create("chunks/plain/00/probe", b"x" * 1000)
        assert not store.backend.exists("chunks/plain/00/probe")
        assert store.backend.create("chunks/plain/00/probe", b"x" * 1000)  # the retry by the caller goes through
    finally:
        proxy.close()


def test_throttling_is_retried_with_backoff(s3_server: S3Server, s3_url: str) -> None:
    proxy = FaultProxy(s3_server.endpoint)
    try:
        store = open_blob_store(with_endpoint(s3_url, proxy.endpoint))
        data = state(400_000, seed=5)
        proxy.throttle_next = 2
        put = store.put(data)
        proxy.throttle_next = 2
        assert store.get(put.uri) == data
        assert proxy.throttled == 4
        proxy.throttle_next = 1000  # throttled past every retry: a clear error, within the retry timeout
        started = time.monotonic()
        with pytest.raises(BlobStoreUnavailable, match=r"\(SlowDown\)"):
            store.get(put.uri)
        assert time.monotonic() - started < 10
    finally:
        proxy.close()


def test_server_killed_mid_upload_and_down_at_restore(own_s3_server: S3Server, tmp_path: Path) -> None:
    """Killed during a checkpoint's upload: not committed, and the agent is told which
    store failed. Down at restore: a clear error naming the store (not 'missing', which
    would make recovery fall back to an older checkpoint). Back up: restore works."""
    url = with_endpoint(own_s3_server.url("agents"), own_s3_server.endpoint)
    with InProcessCoordinator() as coordinator, Connection([coordinator.address], tls=coordinator.client_tls()) as admin, \
            contextlib.ExitStack() as clients:  # closed before the coordinator stops: no thread outlives the test
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=600)))
        live = {"state": state(100_000, seed=6)}
        agent = clients.enter_context(AgentClient("g", "a", [coordinator.address], url, tls=coordinator.client_tls(),
                                                  snapshot=lambda: live["state"], state_dir=tmp_path / "a"))
        agent.register()
        committed = agent.checkpoint()
        backend = agent.blobs.backend  # type: ignore[attr-defined]
        real_create, calls = backend.create, []

        def create_then_crash(key: str, data: object) -> bool:
            calls.append(key)
            if len(calls) == 1:  # the pack's upload
                own_s3_server.kill()
            return real_create(key, data)

        backend.create = create_then_crash
        live["state"] = state(2_000_000, seed=7)
        with pytest.raises(BlobStoreUnavailable, match=r"blob store s3://checkpoints/agents at http://127\.0\.0\.1"):
            agent.checkpoint()
        listed = admin.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", agent_id="a"))
        assert [c.index for c in listed.checkpoints] == [committed]

        restarted = clients.enter_context(AgentClient("g", "a", [coordinator.address], url, tls=coordinator.client_tls(),
                                                      snapshot=lambda: b"", state_dir=tmp_path / "a"))
        restarted.register()
        with pytest.raises(BlobStoreUnavailable, match="blob store s3://checkpoints/agents at http"):
            restarted.restore()
        own_s3_server.start()
        assert restarted.restore().state == state(100_000, seed=6)


def test_gc_deletes_exactly_the_unreferenced_objects(s3_url: str) -> None:
    store = open_blob_store(s3_url)
    base = bytearray(state(1_000_000, seed=8))
    first = store.put(bytes(base))
    base[:20] = b"y" * 20
    second = store.put(bytes(base), parent=first.manifest)
    third = store.put(state(300_000, seed=9))
    first_pack, second_pack = first.manifest.chunks[0].key(None), second.manifest.chunks[0].key(None)
    assert first_pack != second_pack and first_pack in {c.key(None) for c in second.manifest.chunks}
    before = stored_keys(store)
    kept = store.delete_checkpoints([first.uri], grace_s=3600)  # everything is younger than the grace period
    assert (kept.manifests_removed, kept.packs_removed) == (1, 0)
    still_read = store.delete_checkpoints([first.uri], grace_s=0)  # the second checkpoint reads the first pack
    assert (still_read.manifests_removed, still_read.packs_removed) == (0, 0)
    result = store.delete_checkpoints([second.uri], grace_s=0)
    assert (result.manifests_removed, result.packs_removed, result.chunks_removed) == (1, 2, 0)
    assert result.bytes_freed >= 1_000_000
    gone = {store.backend.key_for_uri(first.uri), store.backend.key_for_uri(second.uri), first_pack, second_pack}
    assert stored_keys(store) == before - gone
    assert store.get(third.uri) == state(300_000, seed=9)


def test_gc_spares_a_pack_named_by_a_manifest_written_during_it(s3_url: str) -> None:
    """A writer on another machine, which confirmed its parent present before GC
    deleted it, writes a manifest naming the parent's pack after GC listed the
    manifests: GC sees the new manifest and keeps the pack."""
    store = open_blob_store(s3_url)
    data = state(300_000, seed=10)
    orphan = store.put(data)
    store.delete(orphan.uri)  # its pack is now unreferenced garbage
    real_entries = store.backend.entries
    wrote: list[str] = []

    def entries_with_concurrent_writer(prefix: str):  # type: ignore[no-untyped-def]
        listed = list(real_entries(prefix))
        if prefix == PACKS and not wrote:
            child = replace(orphan.manifest, parent=orphan.manifest.digest)  # reuses every chunk of its parent
            key = f"{MANIFESTS}/{child.digest}.json"
            store.backend.put(key, child.to_json())
            wrote.append(store.backend.uri(key))
        return iter(listed)

    store.backend.entries = entries_with_concurrent_writer  # type: ignore[method-assign]
    result = store.collect_garbage(grace_s=0)
    assert wrote and result.packs_removed == 0
    assert open_blob_store(s3_url).get(wrote[0]) == data


def test_two_agents_share_one_bucket_prefix(s3_url: str) -> None:
    """Each writer packs what its own recent checkpoints do not hold (no store-wide
    index is read), so one agent's GC never takes another's data."""
    a, b = open_blob_store(s3_url), open_blob_store(s3_url)
    common = state(400_000, seed=11)
    put_a = a.put(common + b"agent a")
    put_b = b.put(common + b"agent b")
    assert put_b.chunks_new == put_b.chunks_total
    assert b.get(put_a.uri).endswith(b"agent a") and a.get(put_b.uri).endswith(b"agent b")
    a.delete_checkpoints([put_a.uri], grace_s=0)  # agent a's GC must not take b's data
    assert b.get(put_b.uri) == common + b"agent b"
    with pytest.raises(BlobMissing):
        b.get(put_a.uri)


def test_urls_never_carry_credentials_and_bad_urls_fail_early() -> None:
    for bad, message in [("s3://AKIA:secret@bucket/p", "credentials never go in"),
                         ("s3://bucket/p?aws_secret_access_key=x", "credentials never go in"),
                         ("s3://bucket/p?colour=blue", "unknown s3:// URL parameter"),
                         ("s3:///p", "names no bucket"),
                         ("s3://bucket/p?retry_timeout=soon", "must be a number")]:
        with pytest.raises(ValueError, match=message):
            S3Backend(bad)
    with pytest.raises(ValueError, match="unsupported blob store location gs://"):
        open_blob_store("gs://bucket/p")


def test_a_bounded_read_stops_past_its_limit() -> None:
    """A manifest or chunk longer than its reader allows is cut at the limit + 1 bytes
    (the object store's own listing size says so before the body is read)."""
    from obstore.store import MemoryStore

    backend = S3Backend("s3://bucket/p", env={"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"})
    backend._store = MemoryStore()  # the same obstore calls, without a server
    backend.put("k", b"x" * 300_000)
    assert len(backend.get("k", max_bytes=1_000)) == 1_001
    assert len(backend.get("k", max_bytes=300_000)) == 300_000 == len(backend.get("k"))


def test_credentials_from_the_shared_file_only_when_the_environment_has_none(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n"
                     "[ci]\naws_access_key_id = AK2\naws_secret_access_key = SK2\naws_session_token = T\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds)}
    assert shared_file_credentials(env) == {"access_key_id": "AK", "secret_access_key": "SK"}
    assert shared_file_credentials({**env, "AWS_PROFILE": "ci"})["session_token"] == "T"
    assert shared_file_credentials({**env, "AWS_ACCESS_KEY_ID": "from-env"}) == {}
    with pytest.raises(ValueError, match="no profile 'nope'"):
        shared_file_credentials({**env, "AWS_PROFILE": "nope"})


def test_credentials_file_reaches_the_server(s3_server: S3Server, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = {s3_server.access_key}\n"
                     f"aws_secret_access_key = {s3_server.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    store = open_blob_store(s3_server.url("from-file"), inline_max_bytes=0)  # a small state, sent to the server
    assert store.get(store.put(b"via the credentials file").uri) == b"via the credentials file"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    with pytest.raises(BlobStoreUnavailable) as denied:
        open_blob_store(s3_server.url("from-file"), inline_max_bytes=0).put(b"x")
    assert "wrong-secret" not in str(denied.value) and s3_server.secret_key not in str(denied.value)


def test_s3_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if `pip install raftpoint` without [s3]
    monkeypatch.delitem(sys.modules, "agent_client.blobs.s3", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'raftpoint\[s3\]'"):
        open_blob_store("s3://bucket/prefix")
    assert open_blob_store(tmp_path).backend.location == str(tmp_path.resolve())  # directories need nothing


def test_sub_location_keeps_the_url_parameters(tmp_path: Path) -> None:
    assert sub_location("s3://b/p?endpoint=http://h:1&region=r", "g1") == "s3://b/p/g1?endpoint=http://h:1&region=r"
    assert sub_location("s3://b", "g1") == "s3://b/g1"
    assert sub_location(str(tmp_path), "g1") == str(tmp_path / "g1")
    with pytest.raises(ValueError, match="single path segment"):
        sub_location("s3://b/p", "../escape")


def test_a_first_start_takes_fresh_ports_when_one_was_taken_meanwhile(tmp_path: Path, monkeypatch) -> None:
    """The harness picks free ports and `weed` binds them a moment later; a port taken
    in between makes `weed` exit, and the start must try again rather than fail CI."""
    from coordinator.harness import s3_server as harness

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks: list[list[int]] = []

    def first_pick_collides(n: int) -> list[int]:
        ports = harness_free_ports(n)
        if not picks:
            ports[6] = taken.getsockname()[1]  # the S3 port of the first pick
        picks.append(ports)
        return ports

    harness_free_ports = harness.free_ports
    monkeypatch.setattr(harness, "free_ports", first_pick_collides)
    try:
        server = harness.start_s3_server(tmp_path / "s3", timeout=30)
        try:
            assert len(picks) == 2
            assert server.ports["s3"] != taken.getsockname()[1]
            assert server._ready()  # the second start answers S3 requests
        finally:
            server.stop()
    finally:
        taken.close()
