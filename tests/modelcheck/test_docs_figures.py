"""The summary of what the model checker explored agrees with the runs it summarizes.

docs/chaos.md gives each completed search once in a table of its own (states,
transitions, depth, time) and again in the summary "What has been explored"; the
summary is what a reader trusts, so each of its figures must be a row's states in a
table of the runs below it, under the same mode.
"""
from __future__ import annotations

import re
from pathlib import Path

CHAOS_DOC = Path(__file__).resolve().parents[2] / "docs" / "chaos.md"
SUMMARY_HEADER = "| agents, failures, network faults |"
FIGURE = re.compile(r"^\d{1,3}(,\d{3})*$")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def summary(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The summary's mode names and its rows of cells."""
    start = next(i for i, line in enumerate(lines) if line.startswith(SUMMARY_HEADER))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return cells(lines[start])[1:], rows


def test_every_figure_of_the_summary_is_a_run_in_the_tables_below() -> None:
    lines = CHAOS_DOC.read_text().splitlines()
    modes, rows = summary(lines)
    run_rows = {(c[0], c[1]) for c in map(cells, lines) if len(c) > 2 and c[0] in modes}
    figures = [(mode, cell, row[0]) for row in rows for mode, cell in zip(modes, row[1:])
               if FIGURE.match(cell)]
    assert any(all(FIGURE.match(cell) for cell in row[1:]) for row in rows), \
        f"no row of the summary has a figure in every mode: {rows}"
    missing = [f for f in figures if (f[0], f[1]) not in run_rows]
    assert not missing, f"summary figures (mode, states, size) with no run of those states below: {missing}"
