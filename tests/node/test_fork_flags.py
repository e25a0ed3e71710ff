"""`raftpoint restore --into`: flags that make no fork are refused in one line, exit 2,
before any cluster or blob store is touched."""
from __future__ import annotations

import pytest

from raftpoint.cli.main import main as raftpoint


@pytest.mark.parametrize("flags, says", [
    (["--savepoint", "s", "--into", "f"], "--into needs --blob-store DIR|URL"),
    (["--containing", "a:1", "--into", "f", "--blob-store", "b"], "--into forks a savepoint: give --savepoint"),
    (["--savepoint", "s", "--blob-store", "b"], "--blob-store is for a fork: give --into NEW"),
])
def test_flags_that_make_no_fork_are_refused_in_one_line(flags: list[str], says: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert raftpoint(["restore", "g", *flags, "--endpoints", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
