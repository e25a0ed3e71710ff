"""The agent workload's invariants judged from the history alone: the ledger's
journal replays to the same verdicts, and what is missing from a history fails."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos import checker
from chaos.history import History, load
from chaos.report import InvariantResult
from chaos.tokens import invariants
from chaos.tokens.ledger import Ledger
from coordinator.core.model import Fence

GROUP = "tok-g"


def journaled(history: History, *, orphan: bool) -> Ledger:
    """A group's ledger journaled into `history` as the agent workload does it; with
    `orphan`, b keeps a delivery whose send a's rollback undid."""
    history.note("agents-x-ledger", invariants.OPEN, {"group": GROUP, "agents": ["a", "b"], "tokens_each": 10})
    book = Ledger(["a", "b"], 10, journal=lambda event, args: history.note(
        "agents-x-ledger", invariants.EVENT, {"group": GROUP, "event": event, "args": args}))
    book.sent(id="m1", sender="a", receiver="b", amount=3, interval=2, generation=1, envelope="e")
    book.accepted("m1", "b", interval=5, generation=1)
    book.line(1, [Fence("a", 2, 1)] + ([] if orphan else [Fence("b", 2, 4)]))
    book.committed("a", 1, "file://a/1", "00", 1)
    book.audit("end", {"a": 10, "b": 10}, {"a": 2, "b": 2 if not orphan else 1}, [])
    history.note("agents-x-ledger", invariants.FINAL, {"group": GROUP, "network": [], "final_audit": True,
                                                        "problems": []})
    for name in (invariants.ZOMBIES, invariants.CHECKPOINTS, invariants.WORKLOAD):
        history.note("agents-results", invariants.RESULT,
                     invariants.recorded_result(InvariantResult(name, True, {"seen": 1}), []))
    return book


def verdicts(results: list[InvariantResult]) -> dict[str, tuple[bool, int, dict[str, Any]]]:
    return {r.name: (r.ok, r.violations, r.counts) for r in results}


def test_a_journaled_ledger_replays_to_the_same_verdict(tmp_path: Path) -> None:
    for orphan in (False, True):
        path = tmp_path / f"history-{orphan}.jsonl"
        with History(path) as history:
            book = journaled(history, orphan=orphan)
        live = book.verdict(final=True)
        replayed = invariants.results(load(path))  # through the JSON file, as a later check reads it
        assert [r.name for r in replayed] == [*invariants.NAMES.values(), invariants.ZOMBIES,
                                              invariants.CHECKPOINTS, invariants.WORKLOAD]
        by_name = {r.name: r for r in replayed}
        assert by_name["agent-no-orphans"].ok == (not orphan) == live.ok
        assert by_name["agent-no-orphans"].counts["sends_undone"] == live.counts["sends_undone"] == 1
        assert by_name[invariants.WORKLOAD].counts == {"seen": 1}


def test_the_checker_cli_reports_the_agent_invariants_of_a_history(tmp_path: Path, capsys) -> None:
    path = tmp_path / "history.jsonl"
    with History(path) as history:
        journaled(history, orphan=True)
    assert checker.main([str(path), "--json"]) == 1
    names = {i["name"]: i["ok"] for i in json.loads(capsys.readouterr().out)["invariants"]}
    assert names["agent-no-orphans"] is False and names["agent-tokens-conserved"] is True
    assert len(names) == 15 + 8


def test_a_history_cut_short_fails_the_agent_invariants() -> None:
    history = History()
    journaled(history, orphan=False)
    ops = [op for op in history.ops if op.f not in (invariants.FINAL, invariants.RESULT)]
    by_name = {r.name: r for r in invariants.results(ops)}
    assert not by_name["agent-tokens-conserved"].ok and "never audited at the end" in \
        by_name["agent-tokens-conserved"].examples[0]["why"]
    assert not by_name[invariants.ZOMBIES].ok
    assert invariants.results([]) == []  # no agent workload ran: nothing to judge
