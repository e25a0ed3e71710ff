"""`raftpoint snapshot save` and `restore`: restore drills (every acknowledged write is
in the new cluster, from a quiet cluster and from one under load) and the refusals that
keep a restore from touching a live cluster."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster, wait_for
from coordinator.replication import backup_file, snapshot_file
from coordinator.replication.journal_file import read_term_file
from coordinator.storage.protocol import SNAPSHOT_FILE, TERM_FILE
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import FAST, Client

pytestmark = pytest.mark.cluster


def written(client: Client) -> dict[str, object]:
    """What the cluster answers about everything the drill wrote."""
    group = client.call("AdminService", "GetGroup", pb.GetGroupRequest(group="g"))
    checkpoints = client.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g"))
    return {"group": group, "checkpoints": checkpoints}


# `raftpoint snapshot save ...` once its modules are loaded and a line arrives on stdin:
# the line's time is when the save began, not its interpreter's start.
SAVE_ON_CUE = "import sys; from raftpoint.cli.main import main; sys.stdin.readline(); sys.exit(main(sys.argv[1:]))"


@contextlib.contextmanager
def save_process(backup: Path, cluster: LocalCluster) -> Iterator[subprocess.Popen]:
    """`raftpoint snapshot save` in its own process, as an operator runs it, waiting for
    `begin_save`; killed if the block ends before it does."""
    saving = subprocess.Popen([sys.executable, "-c", SAVE_ON_CUE, "snapshot", "save", str(backup),
                               "--data-dir", str(cluster.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        yield saving
    finally:
        if saving.poll() is None:
            saving.kill()
            saving.communicate()


def begin_save(saving: subprocess.Popen) -> float:
    """Let the save go; its time.monotonic() just before."""
    began = time.monotonic()
    saving.stdin.write("go\n")
    saving.stdin.flush()
    return began


def finish_save(saving: subprocess.Popen, backup: Path) -> None:
    out, err = saving.communicate(timeout=120)
    assert saving.returncode == 0 and out.startswith(f"saved {backup}: "), err


def restore_into(new: LocalCluster, backup: Path, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture) -> None:
    """Seed every node of `new` (not started) from `backup`, with its own Raft password."""
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", new.password)
    members = ",".join(n.raft for n in new.nodes)
    for node in new.nodes:
        code = raftpoint(["snapshot", "restore", str(backup), "--data-dir", str(node.data_dir), "--members", members])
        assert code == 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalCluster, dict[str, object]]]:
    """A 3-node cluster with acknowledged writes, and a backup saved from it afterwards."""
    root = tmp_path_factory.mktemp("backup")
    with LocalCluster(root / "old", 3, settings=FAST).start_all() as old:
        old.leader()
        client = Client(old)
        client.create_group()
        for agent in ("a", "b"):
            client.register(agent)
            for index in range(1, 4):
                client.commit(agent, index)
        before = written(client)
        backup = root / "state.backup"
        with save_process(backup, old) as saving:
            begin_save(saving)
            finish_save(saving, backup)
        yield backup, old, before


@pytest.mark.slow
def test_a_new_cluster_restored_from_a_backup_holds_every_acknowledged_write(
        saved: tuple[Path, LocalCluster, dict[str, object]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    backup, old, before = saved
    assert [c.index for c in before["checkpoints"].checkpoints] == [1, 2, 3, 1, 2, 3]
    new = LocalCluster(tmp_path / "new", 3, settings=FAST)
    assert new.password != old.password
    restore_into(new, backup, monkeypatch, capsys)
    with open(backup, "rb") as f:
        info = backup_file.read_info(f)
    for node in new.nodes:
        assert read_term_file(node.data_dir / TERM_FILE)["term"] == info.last_term >= 1
        with open(node.data_dir / SNAPSHOT_FILE, "rb") as f:
            header = snapshot_file.read_header(f)
            _, _, named = snapshot_file.decode_raft_data(f.read(header.raft_len), str)
        assert named == {n.raft for n in new.nodes}, "the restored snapshot must name the new members only"
    with new.start_all():
        new.leader()
        after = written(Client(new))
        assert after == before, f"restored: {after}\nsaved: {before}"
        client = Client(new)
        client.commit("a", 4)  # the restored cluster takes writes after the saved ones
        assert client.checkpoints(agent="a") == [1, 2, 3, 4]


LOADED_AGENTS = ("w1", "w2", "w3")
# The nodes write snapshots of their own under the load too, as a long-running cluster does.
COMPACTING = {**FAST, "compaction_min_entries": 150}
# Bounds of the load: commits per agent (a page of ListCheckpoints holds them all) and seconds.
MAX_COMMITS = 900
MAX_LOAD_S = 90.0


@dataclass
class Load:
    """Checkpoints 1, 2, 3, ... of each agent, committed one after another on a thread per
    agent until stopped (or bounded), each acknowledgement recorded in order with its
    time.monotonic()."""
    cluster: LocalCluster
    agents: tuple[str, ...]
    acked: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    attempted: dict[str, int] = field(default_factory=dict)  # the last index sent, acknowledged or not
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "Load":
        self.acked = {agent: [] for agent in self.agents}
        self.attempted = dict.fromkeys(self.agents, 0)
        self._threads = [threading.Thread(target=self._write, args=(agent,), daemon=True) for agent in self.agents]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _write(self, agent: str) -> None:
        client, end = Client(self.cluster), time.monotonic() + MAX_LOAD_S
        for index in range(1, MAX_COMMITS + 1):
            if self.stop.is_set() or time.monotonic() > end:
                return
            self.attempted[agent] = index
            try:
                client.commit(agent, index)
            except Exception as exc:  # the test fails on it, naming the write
                self.errors.append(f"{agent} checkpoint {index}: {exc!r}")
                return
            self.acked[agent].append((index, time.monotonic()))

    def ended(self) -> bool:
        return not any(thread.is_alive() for thread in self._threads)

    def times(self) -> list[float]:
        return [at for acks in self.acked.values() for _, at in acks]


def outdated_snapshots(cluster: LocalCluster) -> bool:
    """Every node has a snapshot of its own, and has applied entries after it since."""
    statuses = cluster.statuses().values()
    return len(statuses) == len(cluster.nodes) and all(
        s.last_snapshot_index and s.applied_index >= s.last_snapshot_index + 10 for s in statuses)


@pytest.mark.slow
def test_a_backup_saved_under_load_holds_a_prefix_of_each_agents_writes_and_all_before_the_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    backup = tmp_path / "loaded.backup"
    with LocalCluster(tmp_path / "old", 3, settings=COMPACTING).start_all() as old:
        old.leader()
        client = Client(old)
        client.create_group()
        for agent in LOADED_AGENTS:
            client.register(agent)
        with save_process(backup, old) as saving, Load(old, LOADED_AGENTS) as load:
            # A save must not serve a snapshot written before it was asked: each node has one,
            # which misses writes acknowledged since.
            wait_for(lambda: load.errors or load.ended() or outdated_snapshots(old),
                     "a snapshot on every node, and writes applied after it", timeout=60)
            began = begin_save(saving)
            finish_save(saving, backup)
            ended = time.monotonic()
            # Writes go on past the save's end, so the save is known to overlap them.
            wait_for(lambda: load.errors or load.ended() or all(a and a[-1][1] > ended for a in load.acked.values()),
                     "a write of each agent acknowledged after the save ended", timeout=60)
    assert not load.errors, load.errors
    times = load.times()
    before, after = sum(at < began for at in times), sum(at > ended for at in times)
    during = [(agent, index) for agent, acks in load.acked.items() for index, at in acks if began <= at <= ended]
    assert before and during and after, (
        f"the save ({ended - began:.2f} s) did not overlap the load: {before} writes acknowledged before it, "
        f"{len(during)} during, {after} after")
    new = LocalCluster(tmp_path / "new", 3, settings=FAST)
    restore_into(new, backup, monkeypatch, capsys)
    with new.start_all():
        new.leader()
        client = Client(new)
        present = {agent: client.checkpoints(agent=agent) for agent in LOADED_AGENTS}
        for agent, acks in load.acked.items():
            held = present[agent]
            acked_before = [index for index, at in acks if at < began]
            missing = sorted(set(range(1, max(held, default=0) + 1)) - set(held))
            assert not missing and len(held) == len(set(held)), (
                f"{agent}: the backup holds {len(held)} checkpoints up to {max(held, default=0)}, not a prefix: "
                f"it misses {missing}")
            assert len(held) >= len(acked_before), (
                f"{agent}: {len(acked_before)} writes acknowledged before the save began, the backup holds 1..{len(held)}")
            assert len(held) <= load.attempted[agent], (
                f"{agent}: the backup holds 1..{len(held)}, but only 1..{load.attempted[agent]} were ever sent")
        kept = sum(index <= len(present[agent]) for agent, index in during)
        print(f"restore drill under load: save took {ended - began:.2f} s; writes acknowledged before it {before}, "
              f"during it {len(during)} (the backup holds {kept} of them), after it {after}")
        agent = LOADED_AGENTS[0]
        client.commit(agent, len(present[agent]) + 1)  # the restored cluster takes writes after the saved ones
        assert client.checkpoints(agent=agent) == [*present[agent], len(present[agent]) + 1]


def refusal(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str]:
    code = raftpoint(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return code, err


def test_restore_refuses_what_would_touch_a_cluster(saved: tuple[Path, LocalCluster, dict[str, object]],
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    backup, old, _ = saved
    restore = ["snapshot", "restore", str(backup), "--members", "127.0.0.1:7000"]
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", old.password)
    code, err = refusal(capsys, [*restore, "--data-dir", str(tmp_path / "same-password")])
    assert code == 2 and "Raft password is the one the backed-up cluster used" in err, err
    assert not (tmp_path / "same-password").exists()
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", "another-password-of-32-characters")
    code, err = refusal(capsys, [*restore, "--data-dir", str(old.nodes[0].data_dir)])
    assert code == 2 and "not an empty directory" in err, err
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / TERM_FILE).write_text('{"term": 1}')
    code, err = refusal(capsys, [*restore, "--data-dir", str(unfinished)])
    assert code == 2 and "unfinished restore: delete it" in err, err
    code, err = refusal(capsys, [*restore[:4], "no-port", "--data-dir", str(tmp_path / "bad-member")])
    assert code == 2 and "host:port" in err, err


def test_restore_refuses_a_damaged_or_foreign_file(saved: tuple[Path, LocalCluster, dict[str, object]],
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    backup, _, _ = saved
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", "another-password-of-32-characters")
    damaged = tmp_path / "damaged.backup"
    data = bytearray(backup.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    foreign = tmp_path / "foreign.backup"
    foreign.write_bytes(b"not a backup at all")
    for path, words in ((damaged, "damaged backup: its snapshot's SHA-256"), (foreign, "not a raftpoint backup")):
        code, err = refusal(capsys, ["snapshot", "restore", str(path), "--members", "127.0.0.1:7000",
                                     "--data-dir", str(tmp_path / path.stem)])
        assert code == 1 and words in err, err
        assert not (tmp_path / path.stem).exists()


def test_save_never_overwrites_a_file(saved: tuple[Path, LocalCluster, dict[str, object]],
                                      capsys: pytest.CaptureFixture) -> None:
    backup, old, _ = saved
    size = backup.stat().st_size
    code, err = refusal(capsys, ["snapshot", "save", str(backup), "--data-dir", str(old.root)])
    assert code == 2 and "exists" in err and backup.stat().st_size == size, err
