"""What agent_client costs an agent: per message, and per checkpoint.

1. wrap + unwrap per message, per mode (coordinated, BCS, HMNR, FDAS), on the
   protocol core both clients share (agent_client.protocol), agent a sending to agent
   b. Dependency reports are batched and not sent during the timed loop (no RPC):
   this is the local protocol cost -- envelope encode/decode, exact duplicate check,
   the CIC rule, the dependency record, and the delivery log (in memory, on disk with
   one write() per message, and on disk with an fsync per message). No checkpoint is
   forced in this one-way stream (checked).
2. The same with a report per message (dependency_batch=1, the default: reported
   before delivery) and with batches of 100, through AgentClient and real gRPC on
   loopback against the in-process coordinator (agent_client.testing; no Raft, so a
   cluster adds its commit latency on top).
3. Checkpoint commit latency, AgentClient.checkpoint() (blob to the content-addressed
   store, then CommitCheckpoint against the in-process coordinator), for 1 KiB, 1 MiB
   and 64 MiB states: a new state each time, and incremental ones with 1% of the
   bytes changed; bytes written per incremental checkpoint; against writing the same
   state to one file with fsync (temp + fsync + rename + fsync of the directory).
   benchmarks/agent_blobs.py has the same on S3 too, with restore and chunking.
Bounded: fixed message and repetition counts; p99 of few samples is their maximum.
Run: python benchmarks/agent_overhead.py [--quick] [--dir /path/on/the/disk/to/test]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_blobs import KIB, MIB, SIZES, change_one_percent, percentile, timed  # noqa: E402

from agent_client.agent import AgentClient  # noqa: E402
from agent_client.blobs.durable import atomic_write  # noqa: E402
from agent_client.blobstore import LocalBlobStore, PutResult  # noqa: E402
from agent_client.connection import Connection  # noqa: E402
from agent_client.delivery_log import DeliveryLog  # noqa: E402
from agent_client.effects import Blocking, Callback, Effect, drive  # noqa: E402
from agent_client.protocol import AgentProtocol  # noqa: E402
from agent_client.testing import InProcessCoordinator  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402

MODES = [("coordinated", pb.COORDINATED), ("BCS", pb.CIC_BCS), ("HMNR", pb.CIC_HMNR), ("FDAS", pb.CIC_FDAS)]
PAYLOAD = b"x" * 100


def local(effect: Effect) -> Any:
    """Effects answered in memory: only local calls (the delivery log) do real work."""
    if isinstance(effect, (Blocking, Callback)):
        return effect.fn()
    raise AssertionError(f"no RPC expected in the timed loop: {effect}")


def core(name: str, mode: int, members: list[str], log: DeliveryLog, batch: int, tmp: Path) -> AgentProtocol:
    agent = AgentProtocol("g", name, blobs=LocalBlobStore(tmp / "blobs"), deliveries=log, snapshot=dict,
                          members=members, dependency_batch=batch)
    drive(agent.register(), lambda effect: pb.RegisterResponse(incarnation=1, generation=1, mode=mode))
    return agent


def per_message_local(mode: int, members: list[str], messages: int, log_kind: str, tmp: Path) -> float:
    """Microseconds per wrap + unwrap, reports not sent; the best of three runs (the
    machine's other load only ever adds time)."""
    return min(_per_message_local(mode, members, messages, log_kind, tmp / f"run{i}") for i in range(3))


def _per_message_local(mode: int, members: list[str], messages: int, log_kind: str, tmp: Path) -> float:
    path = None if log_kind == "memory" else tmp / f"deliveries-{mode}-{log_kind}.jsonl"
    a = core("a", mode, members, DeliveryLog(None), messages + 1, tmp)
    b = core("b", mode, members, DeliveryLog(path, fsync=log_kind == "fsync"), messages + 1, tmp)
    started = time.perf_counter()
    for _ in range(messages):
        if drive(b.unwrap(a.wrap(PAYLOAD, "b")), local) is None:
            raise AssertionError("a message was not delivered")
    elapsed = time.perf_counter() - started
    if b.forced:
        raise AssertionError(f"{b.forced} checkpoints forced: the loop would time blob writes")
    b.deliveries.close()
    return elapsed / messages * 1e6


def per_message_reported(coordinator: InProcessCoordinator, tmp: Path, messages: int, batch: int) -> float:
    """Microseconds per wrap + unwrap with reports over gRPC (the final flush included)."""
    group = f"g{batch}"
    with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
            group=group, mode=pb.CIC_BCS, lease_ttl_s=600)))
    a, b = (AgentClient(group, n, [coordinator.address], tmp / group, tls=coordinator.client_tls(), snapshot=dict, dependency_batch=batch,
                        background=False) for n in "ab")
    try:
        a.register()
        b.register()
        started = time.perf_counter()
        for _ in range(messages):
            b.unwrap(a.wrap(PAYLOAD, "b"))
        b.flush_dependencies()
        return (time.perf_counter() - started) / messages * 1e6
    finally:
        a.close()
        b.close()


def checkpoints(coordinator: InProcessCoordinator, tmp: Path, size: int, reps: int,
                rng: random.Random) -> dict[str, float]:
    group = f"cp{size}"
    with Connection([coordinator.address], tls=coordinator.client_tls()) as admin:
        admin.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"cg-{group}", spec=pb.GroupSpec(
            group=group, mode=pb.CIC_BCS, lease_ttl_s=600)))
    puts: list[PutResult] = []
    client = AgentClient(group, "a", [coordinator.address], tmp / group, tls=coordinator.client_tls(), snapshot=dict, background=False,
                         after_blob_write=puts.append)
    try:
        client.register()
        new_ms = [timed(lambda: client.checkpoint(rng.randbytes(size)))[0] for _ in range(reps)]
        state = bytearray(rng.randbytes(size))
        client.checkpoint(bytes(state))
        inc_ms, written = [], []
        for _ in range(reps):
            change_one_percent(state, rng)
            inc_ms.append(timed(lambda: client.checkpoint(bytes(state)))[0])
            written.append(puts[-1].bytes_written)
    finally:
        client.close()
    target = tmp / f"single-{size}.bin"
    file_ms = [timed(lambda: atomic_write(target, rng.randbytes(size)))[0] for _ in range(reps)]
    return {"new50": percentile(new_ms, .5), "new99": percentile(new_ms, .99),
            "inc50": percentile(inc_ms, .5), "inc99": percentile(inc_ms, .99),
            "written": sum(written) / len(written) / size, "written_max": max(written) / size,
            "file50": percentile(file_ms, .5), "file99": percentile(file_ms, .99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer messages and repetitions")
    parser.add_argument("--agents", type=int, default=8, help="group size (the HMNR/FDAS vectors)")
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    messages = 2_000 if args.quick else args.messages
    members = ["a", "b"] + [f"m{i}" for i in range(max(0, args.agents - 2))]
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        print(f"1. wrap + unwrap per message, reports batched and not sent ({messages} messages of "
              f"{len(PAYLOAD)} bytes, {len(members)} members), microseconds")
        header = f"{'mode':>12} | {'log in memory':>13} | {'log on disk':>11} | {'+ fsync each':>12}"
        print(header + "\n" + "-" * len(header))
        for name, mode in MODES:
            costs = [per_message_local(mode, members, n, kind, tmp)
                     for kind, n in (("memory", messages), ("disk", messages), ("fsync", min(messages, 300)))]
            print(f"{name:>12} | {costs[0]:13.1f} | {costs[1]:11.1f} | {costs[2]:12.1f}")
        with InProcessCoordinator() as coordinator:
            n = 200 if args.quick else 2_000
            print(f"\n2. with dependency reports over gRPC to the in-process coordinator (BCS, {n} messages)")
            for batch in (1, 100):
                cost = per_message_reported(coordinator, tmp, n, batch)
                print(f"  dependency_batch={batch:<4} {cost:9.1f} us per message")
            print("\n3. checkpoint commit: blob + CommitCheckpoint (in-process coordinator) vs one file with fsync")
            header = (f"{'state':>7} | {'new p50':>8} {'new p99':>8} | {'1% inc p50':>10} {'inc p99':>8} | "
                      f"{'inc written':>11} {'(max)':>6} | {'1 file p50':>10} {'file p99':>8}")
            print(header + "\n" + "-" * len(header))
            for size, label, reps in SIZES:
                r = checkpoints(coordinator, tmp, size, max(2, reps // 5) if args.quick else reps, rng)
                print(f"{label:>7} | {r['new50']:6.1f}ms {r['new99']:6.1f}ms | {r['inc50']:8.1f}ms "
                      f"{r['inc99']:6.1f}ms | {r['written']:10.2%} {r['written_max']:6.1%} | "
                      f"{r['file50']:8.1f}ms {r['file99']:6.1f}ms")
    print(f"\ninc written = bytes the 1%-changed checkpoint wrote (new chunks + manifest) / state size "
          f"(1 KiB = {KIB} B is one chunk: any change rewrites it). Targets: BCS wrap+unwrap < 20 us; "
          f"a 1%-changed {64 * MIB // MIB} MiB checkpoint writes < 5% of its bytes.")


if __name__ == "__main__":
    main()
