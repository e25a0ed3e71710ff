"""The committed protobuf modules must be what proto/generate.py produces now."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    committed = ROOT / "coordinator" / "api" / "v1"
    fresh = sorted(p.name for p in (tmp_path / "v1").iterdir())
    assert fresh == sorted(p.name for p in committed.iterdir() if p.is_file() and p.suffix in (".py", ".pyi"))
    stale = [name for name in fresh if (tmp_path / "v1" / name).read_bytes() != (committed / name).read_bytes()]
    assert not stale, f"run `python proto/generate.py`; stale: {stale}"


def test_proto_is_not_a_package() -> None:
    assert not (ROOT / "proto" / "__init__.py").exists()
    assert not list((ROOT / "proto").rglob("*_pb2.py"))
