"""Checkpoint write latency of the agent blob store vs one fsynced file.

For 1 KiB, 1 MiB and 64 MiB states: a new state every time (every chunk new), an
incremental checkpoint (the previous state with 1% of its bytes changed in place, one
contiguous region at a random offset, written with the previous manifest as parent),
and the baseline: the whole state written to one file (temp + fsync + rename + fsync
of the directory, the same durability the store gives). Also restore (get, fully
verified) and CDC chunking alone for 64 MiB (the bar: < 3 s in pure Python).
Bounded: a fixed number of repetitions per size; p99 of few samples is their maximum.
Run: python benchmarks/agent_blobs.py [--dir /path/on/the/disk/to/test] [--quick]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_client.blobs import chunking  # noqa: E402
from agent_client.blobs.durable import atomic_write  # noqa: E402
from agent_client.blobstore import LocalBlobStore, PutResult  # noqa: E402

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


def bench_size(root: Path, size: int, reps: int, rng: random.Random) -> dict[str, float]:
    store = LocalBlobStore(root / f"store-{size}")
    new_ms = [timed(lambda: store.put(rng.randbytes(size)))[0] for _ in range(reps)]
    state = bytearray(rng.randbytes(size))
    last: PutResult = store.put(bytes(state))
    inc_ms, written = [], []
    for _ in range(reps):
        change_one_percent(state, rng)
        ms, last = timed(lambda: store.put(bytes(state), parent=last.manifest))  # type: ignore[misc]
        inc_ms.append(ms)
        written.append(last.bytes_written)  # type: ignore[attr-defined]
    get_ms = [timed(lambda: store.get(last.uri))[0] for _ in range(min(reps, 5))]  # type: ignore[attr-defined]
    target = root / f"single-{size}.bin"
    file_ms = [timed(lambda: atomic_write(target, rng.randbytes(size)))[0] for _ in range(reps)]
    return {"new50": percentile(new_ms, .5), "new99": percentile(new_ms, .99),
            "inc50": percentile(inc_ms, .5), "inc99": percentile(inc_ms, .99),
            "written": sum(written) / len(written) / size, "written_max": max(written) / size,
            "get50": percentile(get_ms, .5),
            "file50": percentile(file_ms, .5), "file99": percentile(file_ms, .99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    rng = random.Random(42)
    big = rng.randbytes(64 * MIB)
    chunk_ms, bounds = timed(lambda: chunking.chunk_bounds(big))
    print(f"CDC chunking of 64 MiB: {chunk_ms:.0f} ms, {len(bounds)} chunks "  # type: ignore[arg-type]
          f"(mean {64 * MIB / len(bounds) / KIB:.0f} KiB)\n")  # type: ignore[arg-type]
    header = (f"{'state':>7} | {'new p50':>8} {'new p99':>8} | {'1% inc p50':>10} {'inc p99':>8} | "
              f"{'inc written':>11} {'(max)':>6} | {'restore p50':>11} | {'1 file p50':>10} {'file p99':>8}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for size, label, reps in SIZES:
            r = bench_size(Path(tmp), size, max(2, reps // 5) if args.quick else reps, rng)
            print(f"{label:>7} | {r['new50']:6.1f}ms {r['new99']:6.1f}ms | {r['inc50']:8.1f}ms {r['inc99']:6.1f}ms | "
                  f"{r['written']:10.2%} {r['written_max']:6.1%} | {r['get50']:9.1f}ms | "
                  f"{r['file50']:8.1f}ms {r['file99']:6.1f}ms")
    print("\ninc written = bytes written by the 1%-changed checkpoint (chunks + manifest) / state size; "
          "1 KiB states are one chunk, so any change rewrites it.")


if __name__ == "__main__":
    main()
