"""Runs every golden script under testdata/<family>/ with its family's driver
(format and commands: tests/golden/datadriven.py). REWRITE=1 rewrites the scripts."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests.golden.cic_driver import BcsDriver
from tests.golden.datadriven import Driver, ScriptError, check_file
from tests.golden.history_driver import HistoryDriver
from tests.golden.state_machine_driver import StateMachineDriver

TESTDATA = Path(__file__).parent / "testdata"
FAMILIES: dict[str, Callable[[], Driver]] = {
    "state_machine": StateMachineDriver,
    "recovery_line": HistoryDriver,
    "cic_bcs": BcsDriver,
}
STORY = TESTDATA / "state_machine" / "cic_recovery.txt"  # the script the runner's own tests edit
SCRIPTS = sorted((family, path) for family in FAMILIES for path in (TESTDATA / family).glob("*.txt"))


def test_every_family_has_scripts() -> None:
    assert {family for family, _ in SCRIPTS} == set(FAMILIES)


@pytest.mark.parametrize(("family", "path"), SCRIPTS, ids=[f"{f}/{p.name}" for f, p in SCRIPTS])
def test_script(family: str, path: Path) -> None:
    report = check_file(path, FAMILIES[family])
    if report:
        pytest.fail(f"{family}/{path.name} differs (REWRITE=1 to accept the actual output):\n{report}", pytrace=False)


def _copy_with_edit(tmp_path: Path, old: str, new: str) -> Path:
    copy = tmp_path / STORY.name
    text = STORY.read_text()
    assert old in text, f"{old!r} not in {STORY.name}"
    copy.write_text(text.replace(old, new, 1))
    return copy


def test_an_edited_expected_line_is_reported_with_a_diff(tmp_path: Path) -> None:
    copy = _copy_with_edit(tmp_path, "ok: group g (bcs), members a b", "ok: group g (bcs), members a")
    report = check_file(copy, StateMachineDriver, rewrite=False)
    assert "-ok: group g (bcs), members a\n+ok: group g (bcs), members a b" in report
    assert report.startswith(f"{copy.name}:") and report.count("--- expected") == 1  # that case alone, by line


def test_rewrite_restores_the_actual_output(tmp_path: Path) -> None:
    copy = _copy_with_edit(tmp_path, "ok: group g (bcs), members a b", "wrong")
    check_file(copy, StateMachineDriver, rewrite=True)
    assert copy.read_text() == STORY.read_text()
    assert check_file(copy, StateMachineDriver, rewrite=False) == ""


@pytest.mark.parametrize(("script", "message"), [
    ("fly a\n----\n", "unknown command 'fly'"),
    ("checkpoint a idx=2\n----\n", "unknown option(s) idx"),
    ("checkpoint\n----\n", "needs at least 1 argument"),
    ("checkpoint a\n", "must be followed by a '----' line"),
])
def test_a_mistake_in_a_script_names_its_line(tmp_path: Path, script: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("agents a\n----\nagents a\n\n" + script)
    with pytest.raises(ScriptError, match="bad.txt:5") as caught:
        check_file(path, HistoryDriver, rewrite=False)
    assert message in str(caught.value)
