"""`raftpoint completion`: a script the shell accepts, naming every subcommand."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from raftpoint.cli.main import SUBCOMMAND_MODULES, build_parser


def completion(shell: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftpoint.cli.main", "completion", shell], capture_output=True,
                          text=True, timeout=60)


def test_the_bash_script_parses_and_completes_every_subcommand() -> None:
    done = completion("bash")
    assert done.returncode == 0, done.stderr
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert len(commands) >= len(SUBCOMMAND_MODULES)
    missing = [name for name in commands if name not in done.stdout]
    assert missing == [], f"not in the completion script: {missing}"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to parse the script with")
    checked = subprocess.run([bash, "-n"], input=done.stdout, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_an_unknown_shell_is_one_line_and_exit_2() -> None:
    done = completion("fish")
    assert done.returncode == 2 and "invalid choice: 'fish'" in done.stderr and "Traceback" not in done.stderr
