"""`raftpoint repair --from-peers`: what it moves aside, what it keeps, and bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.storage.protocol import JOURNAL_FILE, SNAPSHOT_FILE, STORE_DIR, TERM_FILE
from raftpoint.cli import main as cli


def damaged_node(tmp_path: Path) -> Path:
    data = tmp_path / "node0"
    (data / STORE_DIR).mkdir(parents=True)
    (data / STORE_DIR / "data.mdb").write_bytes(b"pages")
    for name, content in ((JOURNAL_FILE, b"journal"), (SNAPSHOT_FILE, b"snapshot"),
                          (TERM_FILE, b'{"commit_index": 40, "term": 7}')):
        (data / name).write_bytes(content)
    return data


def test_repair_moves_what_the_peers_give_back_and_keeps_the_vote(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    data = damaged_node(tmp_path)
    assert cli.main(["repair", "--from-peers", "--data-dir", str(data)]) == 0
    assert "kept its term and vote" in capsys.readouterr().out
    assert json.loads((data / TERM_FILE).read_bytes()) == {"commit_index": 40, "term": 7, "log_lost_in_term": 7}
    assert sorted(p.name for p in data.iterdir()) == ["damaged-0", TERM_FILE]
    assert (data / "damaged-0" / JOURNAL_FILE).read_bytes() == b"journal"
    assert (data / "damaged-0" / STORE_DIR / "data.mdb").read_bytes() == b"pages"
    (data / JOURNAL_FILE).write_bytes(b"damaged again")
    assert cli.main(["repair", "--from-peers", "--data-dir", str(data)]) == 0
    assert (data / "damaged-1" / JOURNAL_FILE).read_bytes() == b"damaged again"
    assert cli.main(["repair", "--from-peers", "--data-dir", str(data)]) == 0
    assert "nothing to move" in capsys.readouterr().out and not (data / "damaged-2").exists()


def test_repair_refuses_a_missing_data_dir_and_changes_nothing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["repair", "--from-peers", "--data-dir", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
