"""A node refuses Raft files of an older, unauthenticated format at start, naming
`raftpoint migrate`, before anything in them is read; after the migration it starts
on them and keeps every entry."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pysyncobj.node import TCPNode

from coordinator import config
from coordinator.harness.local_cluster import free_ports
from coordinator.replication import journal_format, snapshot_file
from coordinator.replication.node import CoordinatorNode
from coordinator.storage.memory import MemoryStore
from coordinator.storage.protocol import JOURNAL_FILE, SNAPSHOT_FILE, STORE_DIR, OldFormat
from raftpoint.cli import main as cli
from tests.replication.test_node import one_node_with_checkpoints, wait_for
from tests.support.old_formats import (NO_OP, command, planted, write_crc_journal, write_pysyncobj_journal,
                                       write_v1_snapshot)

PASSWORD = "a test cluster password"
DEADLINE = 60.0


def node_config(data_dir: Path) -> config.NodeConfig:
    raft, grpc, metrics = free_ports(3)
    return config.load(env={}, flags={"data_dir": str(data_dir), "raft_address": f"127.0.0.1:{raft}",
                                      "grpc_address": f"127.0.0.1:{grpc}", "metrics_address": f"127.0.0.1:{metrics}",
                                      "raft_password": PASSWORD, "insecure": True})


def test_a_planted_journal_of_the_checksummed_format_is_refused_at_start_and_never_run(tmp_path: Path) -> None:
    """Whoever can write the data dir can write a CRC-checked journal (a CRC is no
    secret) whose committed entry runs code when unpickled: the node refuses the file
    with one line naming the command and exits, and the entry never runs."""
    data_dir, marker = tmp_path / "node", tmp_path / "ran"
    write_crc_journal(data_dir / JOURNAL_FILE, [(NO_OP, 1, 0), (planted(marker), 2, 1)], commit_index=2)
    cfg = node_config(data_dir)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}, "RAFTPOINT_RAFT_PASSWORD": PASSWORD}
    node = subprocess.Popen([sys.executable, "-m", "coordinator", "--data-dir", str(data_dir), "--insecure",
                             "--raft-address", cfg.raft_address, "--grpc-address", cfg.grpc_address,
                             "--metrics-address", cfg.metrics_address],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + DEADLINE
        while node.poll() is None and not marker.exists() and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        if node.poll() is None:
            node.kill()
        _out, err = node.communicate()
    assert not marker.exists(), f"the planted entry ran; the node said: {err[-2000:]}"
    assert node.returncode == 1, err
    refusals = [line for line in err.splitlines() if "raftpoint migrate" in line]
    assert refusals == [f"raftpoint coordinator: {data_dir / JOURNAL_FILE} is a journal of the CRC-checked format, "
                        f"which carries no MAC and is not read at start: with the node stopped, run `raftpoint migrate "
                        f"--data-dir {data_dir}` once, with the node's Raft password, then start it"], err
    assert "Traceback" not in err


def _pysyncobj_journal(data_dir: Path) -> str:
    write_pysyncobj_journal(data_dir / JOURNAL_FILE, [(NO_OP, 1, 0), (command(b"x"), 2, 1)], commit_index=2)
    return JOURNAL_FILE


def _v1_snapshot(data_dir: Path) -> str:
    data_dir.mkdir(parents=True)
    store = MemoryStore()
    store.commit({b"k": b"v"}, 3)
    raft_json = snapshot_file.encode_raft_data(((command(b"x"), 3, 1), (NO_OP, 2, 1), {TCPNode("127.0.0.1:1")}))
    write_v1_snapshot(data_dir / SNAPSHOT_FILE, 3, raft_json, store.write_image)
    return SNAPSHOT_FILE


@pytest.mark.parametrize("old", [_pysyncobj_journal, _v1_snapshot])
def test_a_pysyncobj_journal_or_a_version_1_snapshot_is_refused_at_start(tmp_path: Path, old) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "node"
    name = old(data_dir)
    before = (data_dir / name).read_bytes()
    with pytest.raises(OldFormat, match=f"{data_dir / name} is .*`raftpoint migrate --data-dir {data_dir}`"):
        CoordinatorNode(node_config(data_dir), MemoryStore())
    assert (data_dir / name).read_bytes() == before


def test_a_node_migrated_from_the_checksummed_format_starts_with_every_entry(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cluster = one_node_with_checkpoints(tmp_path, 3)
    cluster.close()
    cfg = cluster.config(0)
    data_dir = Path(cfg.data_dir)
    journal = data_dir / JOURNAL_FILE
    entries = journal_format.scan(journal.read_bytes(), journal_format.record_key(cfg.password())).entries
    write_crc_journal(journal, entries)  # the node's own log, as the previous format held it
    shutil.rmtree(data_dir / STORE_DIR)  # so the state can only come back from the journal
    with pytest.raises(OldFormat):
        CoordinatorNode(cfg, MemoryStore())
    password_file = tmp_path / "raft-password"
    password_file.write_text(cfg.password() + "\n")
    migrate = ["migrate", "--data-dir", str(data_dir), "--raft-password-file", str(password_file)]

    assert cli.main(migrate) == 0
    assert f"converted {journal}: {len(entries)} entries of a journal of the CRC-checked format" in capsys.readouterr().out
    node = cluster.start(0)
    try:
        wait_for(lambda: [c.index for c in node.read_state().checkpoints("g", "a")] == [1, 2, 3],
                 "the migrated journal's entries to be applied")
    finally:
        cluster.close()
    assert cli.main(migrate) == 0
    assert "nothing to convert" in capsys.readouterr().out


def test_migrate_refuses_bad_input_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    short = tmp_path / "short"
    short.write_text("too short\n")
    assert cli.main(["migrate", "--data-dir", str(tmp_path / "none")]) == 2
    assert cli.main(["migrate", "--data-dir", str(tmp_path), "--raft-password-file", str(short)]) == 2
    write_crc_journal(tmp_path / JOURNAL_FILE, [(NO_OP, 1, 0), (planted(tmp_path / "ran"), 2, 1)], commit_index=2)
    password_file = tmp_path / "raft-password"
    password_file.write_text(PASSWORD)
    assert cli.main(["migrate", "--data-dir", str(tmp_path), "--raft-password-file", str(password_file)]) == 65
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"raftpoint migrate: {tmp_path / 'none'} is not a directory"
    assert "fewer than 16" in err[1]
    assert "entry 2 is not one a node writes" in err[2] and len(err) == 3
    assert not (tmp_path / "ran").exists()
