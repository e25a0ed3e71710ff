"""The README's 'Agents in a few lines' block runs as written."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    section = (ROOT / "README.md").read_text().split("### Agents in a few lines", 1)[1]
    return re.search(r"```python\n(.+?)\n```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    code = f"data_dir = {str(tmp_path)!r}\n" + readme_block()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "{'notes': ['outline the report']}", result.stdout + result.stderr
