"""`raftpoint demo` end to end: real cluster, agent processes, SIGKILL, recovery, token audit,
and the last group restored to a savepoint."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.blobstore import open_blob_store
from coordinator.harness.s3_server import S3Server


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("mode", ["all", "hmnr"])
def test_demo_exits_0_and_conserves_tokens(tmp_path: Path, mode: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--agents", "3", "--mode", mode,
                           "--seconds", "4", "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases = 2 if mode == "all" else 1
    assert proc.stdout.count("CRASH: SIGKILL") == phases
    assert proc.stdout.count("matches what-if: True") == phases
    assert "NOT CONSERVED" not in proc.stdout and "every recovery conserved the tokens" in proc.stdout
    travel = proc.stdout[proc.stdout.index(f"== phase {phases + 1}: group time travel"):]
    assert "every agent rolled back to its savepoint checkpoint" in travel
    assert "per-agent tokens match the savepoint" in travel and "refused as orphans:" in travel, travel
    assert not list(tmp_path.glob("logs/*")) or all(p.stat().st_size < 1_000_000 for p in tmp_path.glob("logs/*"))
    page = tmp_path / "groups.html"
    assert f"the groups' space-time diagrams: {page} (open it in a browser)" in proc.stdout
    assert page.read_text().count("<svg ") == phases and page.stat().st_mode & 0o777 == 0o644


@pytest.mark.cluster
def test_demo_with_blobs_on_s3(tmp_path: Path, s3_server: S3Server) -> None:
    """Agents on one bucket prefix: they checkpoint there, one is killed, recovery restores from S3."""
    url = s3_server.url("demo")
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--agents", "3", "--mode", "bcs",
                           "--seconds", "4", "--data-dir", str(tmp_path), "--blob-store", url],
                          capture_output=True, text=True, timeout=180, env={**os.environ, **s3_server.env()})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agents put checkpoint blobs in s3://checkpoints/demo at http://127.0.0.1" in proc.stdout
    assert proc.stdout.count("CRASH: SIGKILL") == 1 and "every recovery conserved the tokens" in proc.stdout
    assert not (tmp_path / "blobs").exists()
    os.environ.update(s3_server.env())
    assert any(open_blob_store(url).backend.keys("manifests"))


def test_demo_rejects_bad_arguments() -> None:
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--agents", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--agents" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--blob-store", "s3://key:secret@b/p"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "credentials never go in the blob store URL" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "demo", "--picture", "/no/such/dir/p.html"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--picture: cannot write /no/such/dir/p.html" in proc.stderr, proc.stderr
