"""`raftpoint snapshot save` and `restore`: a restore drill (every acknowledged write is
in the new cluster) and the refusals that keep a restore from touching a live cluster."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import LocalCluster
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
        # In its own process, as an operator runs it.
        saving = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "snapshot", "save", str(backup),
                                 "--data-dir", str(old.root)], capture_output=True, text=True, timeout=120)
        assert saving.returncode == 0 and saving.stdout.startswith(f"saved {backup}: "), saving.stderr
        yield backup, old, before


@pytest.mark.slow
def test_a_new_cluster_restored_from_a_backup_holds_every_acknowledged_write(
        saved: tuple[Path, LocalCluster, dict[str, object]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    backup, old, before = saved
    assert [c.index for c in before["checkpoints"].checkpoints] == [1, 2, 3, 1, 2, 3]
    new = LocalCluster(tmp_path / "new", 3, settings=FAST)
    assert new.password != old.password
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", new.password)
    members = ",".join(n.raft for n in new.nodes)
    for node in new.nodes:
        code = raftpoint(["snapshot", "restore", str(backup), "--data-dir", str(node.data_dir), "--members", members])
        assert code == 0, capsys.readouterr().err
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
