"""The operator's view: `raftpoint cluster up` starts, reports and stops a cluster;
`raftpoint status` reads it and says when there is no leader."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coordinator.endpoints_file import read_endpoints
from coordinator.harness.local_cluster import wait_for
from tests.support.cluster_up import RAFTPOINT, stop

pytestmark = pytest.mark.cluster


def _lines(stream) -> queue.Queue:
    """stdout lines on a queue, so reading has a deadline instead of blocking forever."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def _read_until(lines: queue.Queue, prefix: str, timeout: float) -> list[str]:
    """All lines up to and including the first one starting with prefix; fails at the deadline."""
    seen: list[str] = []
    end = time.monotonic() + timeout
    while not (seen and seen[-1].startswith(prefix)):
        try:
            seen.append(lines.get(timeout=max(0.0, end - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no line starting with {prefix!r} within {timeout}s; got {seen}") from None
    return seen


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (a node whose parent was killed is reaped
    by whatever adopts it, which in a container may be never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still running at the deadline (none: all exited)."""
    end = time.monotonic() + timeout
    while (left := [p for p in pids if not _gone(p)]) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def status(data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*RAFTPOINT, "status", "--data-dir", str(data_dir)], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.slow
def test_cluster_up_status_and_clean_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    up = subprocess.Popen([*RAFTPOINT, "cluster", "up", "-n", "3", "--data-dir", str(data_dir)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = _read_until(_lines(up.stdout), "leader: node", timeout=30)
        nodes = [line for line in seen if line.startswith("node")]
        assert len(nodes) == 3 and all(" raft 127.0.0.1:" in n and " grpc 127.0.0.1:" in n for n in nodes)
        pids = _pids(nodes)
        assert len(read_endpoints(data_dir)) == 3

        shown = status(data_dir)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        rows = shown.stdout.splitlines()[1:]
        assert len(rows) == 3 and sum(" leader " in r for r in rows) == 1

        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        assert not _wait_gone(pids, 0)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
    down = status(data_dir)
    assert down.returncode != 0 and down.stdout.count("DOWN") == 3


def _up(data_dir: Path, *extra: str, nodes: int = 3) -> subprocess.Popen:
    return subprocess.Popen([*RAFTPOINT, "cluster", "up", "-n", str(nodes), "--data-dir", str(data_dir), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _node_lines(up: subprocess.Popen) -> list[str]:
    """Each node's line as `cluster up` prints it: addresses, then `pid N`."""
    seen = _read_until(_lines(up.stdout), "leader: node", timeout=30)
    return [line.strip() for line in seen if line.startswith("node")]


def _addresses(lines: list[str]) -> list[str]:
    return [line.split("  pid ")[0] for line in lines]


def _pids(lines: list[str]) -> list[int]:
    return [int(line.rsplit("pid ", 1)[1]) for line in lines]


@pytest.mark.slow
def test_cluster_up_again_on_its_data_dir_starts_the_same_cluster(tmp_path: Path) -> None:
    """Raft keeps its members' addresses: the same data dir on new ports never elected."""
    data_dir = tmp_path / "data"
    first = _up(data_dir)
    try:
        nodes = _node_lines(first)
    finally:
        stop(first)
    assert not _wait_gone(_pids(nodes), 30), "the first cluster's nodes live on"
    recorded = (data_dir / "endpoints.json").read_text()
    again = _up(data_dir)
    try:
        assert _addresses(_node_lines(again)) == _addresses(nodes)
    finally:
        stop(again)
    assert read_endpoints(data_dir) == [line.split(" grpc ")[1].split()[0] for line in _addresses(nodes)]
    assert recorded.count("127.0.0.1") == (data_dir / "endpoints.json").read_text().count("127.0.0.1")


def test_a_killed_cluster_up_takes_its_nodes_with_it(tmp_path: Path) -> None:
    """SIGKILL runs no shutdown code: the nodes must not live on holding the data dir's ports."""
    up = _up(tmp_path / "data")
    pids: list[int] = []
    try:
        pids = _pids(_node_lines(up))
        up.kill()
        up.wait(10)
        assert not _wait_gone(pids, 30), "nodes outlived the cluster up that started them"
    finally:
        stop(up)
        for pid in _wait_gone(pids, 0):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_cluster_up_on_a_running_clusters_data_dir_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = _up(data_dir)
    try:
        _node_lines(first)
        recorded = (data_dir / "endpoints.json").read_text()
        second = subprocess.run([*RAFTPOINT, "cluster", "up", "-n", "3", "--data-dir", str(data_dir), "--timeout", "20"],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stdout + second.stderr
        assert "leader:" not in second.stdout
        assert "is a cluster already running" in second.stderr and "Traceback" not in second.stderr
        assert (data_dir / "endpoints.json").read_text() == recorded
        assert status(data_dir).returncode == 0
    finally:
        stop(first)


@pytest.mark.slow
def test_two_cluster_ups_started_together_on_one_data_dir_leave_one_cluster(tmp_path: Path) -> None:
    """The second exits at once with one line, before it writes anything: the CA, the
    auth files and endpoints.json are the first one's, and its cluster runs."""
    data_dir = tmp_path / "data"
    ups = [_up(data_dir, nodes=1), _up(data_dir, nodes=1)]
    try:
        loser = wait_for(lambda: next((u for u in ups if u.poll() is not None), None), "one cluster up to exit", 30)
        winner = ups[1] if loser is ups[0] else ups[0]
        said = loser.stdout.read()
        lines = [line for line in said.splitlines() if line.strip()]
        assert loser.returncode == 1 and len(lines) == 1, said
        assert "in use by another `raftpoint cluster up`" in lines[0] and f"PID {winner.pid}" in lines[0], said
        nodes = _node_lines(winner)
        recorded = json.loads((data_dir / "endpoints.json").read_text())
        assert [n["pid"] for n in recorded] == _pids(nodes), (recorded, nodes)
        assert status(data_dir).returncode == 0
    finally:
        for up in ups:
            stop(up)


def test_cluster_up_refuses_another_size_than_its_data_dir_holds(tmp_path: Path) -> None:
    (tmp_path / "endpoints.json").write_text(
        '[{"raft": "127.0.0.1:7000", "grpc": "127.0.0.1:7001", "metrics": "127.0.0.1:7002", "pid": null}]')
    done = subprocess.run([*RAFTPOINT, "cluster", "up", "-n", "3", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "holds a 1-node cluster" in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["cluster", "up", "-n", "1"], ["demo"]])
def test_a_data_dir_that_cannot_be_made_is_one_line_not_a_traceback(tmp_path: Path, command: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = subprocess.run([*RAFTPOINT, *command, "--data-dir", str(blocker / "data")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and str(blocker / "data") in done.stderr


@pytest.mark.parametrize("command", [["status"], ["members", "add", "127.0.0.1:9"]])
@pytest.mark.parametrize("endpoints", [None, "{"])
def test_a_missing_or_garbled_endpoints_file_is_one_line_not_a_traceback(
        tmp_path: Path, command: list[str], endpoints: str | None) -> None:
    if endpoints is not None:
        (tmp_path / "endpoints.json").write_text(endpoints)
    done = subprocess.run([*RAFTPOINT, *command, "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "endpoints.json" in done.stderr


def test_cluster_up_stops_waiting_for_a_leader_once_its_own_nodes_have_exited(tmp_path: Path) -> None:
    from coordinator.harness.local_cluster import LocalCluster
    from raftpoint.cli.cluster import _wait_for_leader

    exits_at_once = [sys.executable, "-c", "import sys; print('refused: data dir in use'); sys.exit(1)"]
    with LocalCluster(tmp_path, 3, program=lambda i: exits_at_once) as cluster:
        cluster.start_all()
        started = time.monotonic()
        assert _wait_for_leader(cluster, 30.0, threading.Event()) is None
        assert time.monotonic() - started < 10
