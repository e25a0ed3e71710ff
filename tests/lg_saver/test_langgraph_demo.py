"""`raftpoint demo --langgraph` finds the example or says what is missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from raftpoint.cli import langgraph_demo
from raftpoint.cli.main import build_parser


def test_the_demo_flag_selects_the_langgraph_example() -> None:
    args = build_parser().parse_args(["demo", "--langgraph"])
    assert args.langgraph is True
    assert langgraph_demo.EXAMPLE.exists()


def test_without_the_source_tree_it_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(langgraph_demo, "EXAMPLE", tmp_path / "run.py")
    assert langgraph_demo.run_langgraph() == 2
    assert "source tree" in capsys.readouterr().err
