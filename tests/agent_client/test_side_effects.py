from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.side_effects import InDoubtEffect, SideEffectLog


def test_effect_runs_once_across_a_restart(tmp_path: Path) -> None:
    calls: list[str] = []
    log = SideEffectLog(tmp_path / "effects.db")
    assert log.run("send-email-7", lambda: calls.append("sent") or {"id": 7}) == {"id": 7}
    log.close()
    again = SideEffectLog(tmp_path / "effects.db")  # the agent restarted and replays the step
    assert again.run("send-email-7", lambda: calls.append("sent twice") or {"id": 8}) == {"id": 7}
    assert calls == ["sent"]


def test_crash_between_start_and_result_is_in_doubt(tmp_path: Path) -> None:
    db = tmp_path / "effects.db"
    # A real crash: the process dies inside the effect, after its start was recorded.
    code = ("import os, sys; from agent_client.side_effects import SideEffectLog; "
            f"SideEffectLog({str(db)!r}).run('pay-1', lambda: os._exit(9))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    log = SideEffectLog(db)
    with pytest.raises(InDoubtEffect, match="pay-1"):
        log.run("pay-1", lambda: "paid")
    assert log.run("pay-1", lambda: "paid", retry_in_doubt=True) == "paid"
    assert log.run("pay-1", lambda: "paid again") == "paid"


def test_recorded_tool_calls_replay_their_answers(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    answers = iter(["first answer", "different answer"])
    assert log.record_call("llm-step-3", lambda: next(answers)) == "first answer"
    assert log.record_call("llm-step-3", lambda: next(answers)) == "first answer"


def test_output_commit_holds_effects_until_stable(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    sent: list[int] = []
    log.hold_until_stable("out-1", lambda: sent.append(1), checkpoint_index=4)
    log.hold_until_stable("out-2", lambda: sent.append(2), checkpoint_index=6)
    assert log.release(lambda index: index <= 3) == [] and sent == []
    assert log.release(lambda index: index <= 5) == ["out-1"] and sent == [1]
    log.discard_held_after(5)  # rolled back to checkpoint 5: out-2 belonged to undone work
    assert log.release(lambda index: True) == [] and sent == [1]
