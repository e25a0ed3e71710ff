from __future__ import annotations

from importlib import metadata

import pytest

from raftpoint.cli.main import main


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"raftpoint {metadata.version('raftpoint')}"
