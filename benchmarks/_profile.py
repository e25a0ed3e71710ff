"""Where a node's CPU goes: py-spy samples of a running node, sorted into the parts of
a write's path, so a benchmark can say which part a missed target is spent in.

py-spy (`pip install py-spy`; Linux, and ptrace rights over the node) samples each
Python thread's stack without stopping the process; threads waiting in the kernel
(epoll, locks) are left out, so a share is of the time a thread was running or in
a system call that does work (fdatasync, send). A sample counts for the part of its
innermost frame that names one: a gRPC call inside a handler is gRPC, an fdatasync
inside the journal is the journal.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

# (part, path fragments of a frame's file), innermost match wins; the first listed of
# two matching parts wins within one frame.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("journal (append, fdatasync)", ("replication/journal",)),
    ("store (LMDB, background commit)", ("coordinator/storage/", "lmdb/", "store_committer")),
    ("state machine (pure core)", ("coordinator/core/",)),
    ("Raft messages (framing, sockets)", ("replication/raft_link", "pysyncobj/tcp_connection", "pysyncobj/poller",
                                          "pysyncobj/transport", "pysyncobj/encryptor", "cryptography/")),
    ("pysyncobj (tick, log, elections)", ("pysyncobj/",)),
    ("replication adapter (batcher, apply)", ("coordinator/replication/",)),
    ("admission, authorization, handlers", ("coordinator/transport/", "coordinator/service/", "coordinator/auth")),
    ("gRPC (Python and Cython frames)", ("grpc/", "connection_front")),
    ("protobuf", ("google/protobuf/",)),
    ("logs and metrics", ("structlog/", "prometheus_client/", "coordinator/observability/")),
    # An event loop's own frames as the innermost: its poll (epoll_wait, counted while
    # the kernel does the I/O) and its callbacks whose code has no Python frames
    # (grpc.aio's completion callbacks are compiled).
    ("event loop: poll", ("selectors.py",)),
    ("event loop: callbacks in compiled code", ("asyncio/events.py",)),
    ("event loop: other", ("asyncio/",)),
    ("threads in compiled code", ("threading.py",)),
)
OTHER = "other"


def py_spy() -> str | None:
    """The py-spy executable beside this Python, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def part_of(stack: list[str]) -> str:
    """The part of one sample; `stack` is its frames, outermost first, each
    "function (file:line)" as py-spy writes them."""
    for frame in reversed(stack):
        for part, fragments in PARTS:
            if any(fragment in frame for fragment in fragments):
                return part
    return OTHER


def parse_raw(text: str) -> Counter[str]:
    """py-spy's raw (collapsed) output, "frame;frame;... count" per line, as counts per part."""
    parts: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            parts[part_of(stack.split(";")[1:])] += int(count)  # the first "frame" names the thread
    return parts


def start(pid: int, seconds: float, out: Path, rate: int = 200) -> subprocess.Popen | None:
    """Sample `pid` for `seconds` into `out` (raw format); None when py-spy is missing."""
    exe = py_spy()
    if exe is None:
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                             "--rate", str(rate), "--format", "raw", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(sampler: subprocess.Popen, out: Path, timeout: float = 60.0) -> Counter[str]:
    """Wait for a sampler started by `start` and read its counts per part."""
    _, err = sampler.communicate(timeout=timeout)
    if sampler.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed ({sampler.returncode}): {err.strip()[-500:]}")
    return parse_raw(out.read_text())


def table(rows: dict[str, tuple[Counter[str], float]]) -> str:
    """One Markdown table: per part, each node's share of its samples and the CPU per
    operation that share stands for. `rows`: node label -> (counts, CPU ms per operation)."""
    labels = list(rows)
    order = [part for part, _ in PARTS] + [OTHER]
    lines = ["| part | " + " | ".join(f"{label} % / ms per op" for label in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for part in order:
        cells = []
        for label in labels:
            counts, ms_per_op = rows[label]
            total = sum(counts.values()) or 1
            share = counts[part] / total
            cells.append(f"{100 * share:.0f}% / {share * ms_per_op:.3f}")
        if any(rows[label][0][part] for label in labels):
            lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"{sum(rows[label][0].values())} samples / {rows[label][1]:.3f}"
                                              for label in labels) + " |")
    return "\n".join(lines)
