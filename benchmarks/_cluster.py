"""Three benchmark node processes on 127.0.0.1 that hand the load to whichever one leads.

Why a separate harness: the load must run *inside* the leader process (in-process
proposals, no RPC hop), and which process wins the election is only known at run
time. So every process runs the same script with `--serve`; the one that becomes
leader runs the work and writes a JSON result, the others serve Raft until it is
done. `coordinator.harness.local_cluster` starts gRPC coordinator processes, which
host no load generator, so only its port and wait helpers are reused here.
Every wait has a deadline and every process is killed on the way out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.harness.local_cluster import free_ports, wait_for  # noqa: E402

ELECTION_TIMEOUT_S = 30.0
SETTLE_S = 0.5  # let every follower connect before measuring
LOG_TAIL_LINES = 15


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """The flags run_cluster passes to each node process (hidden from --help)."""
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    for name in ("raft", "peers", "data-dir", "done", "result"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, default=0, help=argparse.SUPPRESS)


def run_cluster(script: Path, node_args: list[str], *, timeout: float, size: int = 3, label: str = "bench") -> object:
    """Start `size` processes of `script --serve ...` and return the leader's JSON result."""
    with tempfile.TemporaryDirectory(prefix=f"{label}-") as tmp:
        root = Path(tmp)
        addrs = [f"127.0.0.1:{p}" for p in free_ports(size)]
        done, result = root / "done", root / "result.json"
        procs: list[subprocess.Popen] = []
        logs = []
        try:
            for i, addr in enumerate(addrs):
                data = root / f"n{i}"
                data.mkdir()
                logs.append(root / f"n{i}.log")
                with open(logs[-1], "wb") as log:
                    procs.append(subprocess.Popen(
                        [sys.executable, str(script), "--serve", "--raft", addr,
                         "--peers", ",".join(a for a in addrs if a != addr), "--data-dir", str(data),
                         "--done", str(done), "--result", str(result), "--parent", str(os.getpid()), *node_args],
                        stdout=log, stderr=subprocess.STDOUT))
            try:
                wait_for(lambda: done.exists() or any(p.poll() is not None for p in procs), f"{label} run", timeout, 0.2)
                if not done.exists():
                    raise RuntimeError(f"{label}: a node process exited early")
            except (TimeoutError, RuntimeError):
                for log_path in logs:
                    tail = log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                    print(f"--- {log_path.name}\n" + "\n".join(tail), file=sys.stderr)
                raise
            return json.loads(result.read_text())
        finally:
            done.touch()
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)


def serve(args: argparse.Namespace, is_leader: Callable[[], bool], work: Callable[[], object],
          close: Callable[[], None], *, timeout: float) -> None:
    """Node-process side: run `work` if this node leads, else wait for the leader to finish."""
    done, result = Path(args.done), Path(args.result)
    orphaned = lambda: args.parent and os.getppid() != args.parent  # noqa: E731 - the driver died
    try:
        deadline = time.monotonic() + ELECTION_TIMEOUT_S
        while time.monotonic() < deadline and not done.exists() and not is_leader():
            time.sleep(0.05)
        if is_leader() and not done.exists():
            time.sleep(SETTLE_S)
            payload = json.dumps(work())
            tmp = result.with_suffix(".tmp")
            tmp.write_text(payload)
            tmp.rename(result)
            done.touch()
        else:
            wait_for(lambda: done.exists() or orphaned(), "the leader to finish", timeout, 0.1)
    finally:
        close()
