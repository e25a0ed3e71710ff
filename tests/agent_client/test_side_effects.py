from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.side_effects import InDoubtEffect, SideEffectLog

ROOT = Path(__file__).resolve().parents[2]


def test_effect_runs_once_across_a_restart(tmp_path: Path) -> None:
    calls: list[str] = []
    log = SideEffectLog(tmp_path / "effects.db")
    assert log.run("send-email-7", lambda: calls.append("sent") or {"id": 7}) == {"id": 7}
    log.close()
    again = SideEffectLog(tmp_path / "effects.db")  # the agent restarted and replays the step
    assert again.run("send-email-7", lambda: calls.append("sent twice") or {"id": 8}) == {"id": 7}
    assert calls == ["sent"]


def test_first_run_returns_what_a_replay_returns(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    assert log.run("k", lambda: (1, 2)) == [1, 2] == log.run("k", lambda: (3, 4))


def test_crash_between_start_and_result_is_in_doubt(tmp_path: Path) -> None:
    db = tmp_path / "effects.db"
    # A real crash: the process dies inside the effect, after its start was recorded.
    code = ("import os; from agent_client.side_effects import SideEffectLog; "
            f"SideEffectLog({str(db)!r}).run('pay-1', lambda: os._exit(9))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 9
    log = SideEffectLog(db)
    assert log.result("pay-1") == ("started", None)
    with pytest.raises(InDoubtEffect, match="pay-1"):
        log.run("pay-1", lambda: "paid")
    assert log.run("pay-1", lambda: "paid", retry_in_doubt=True) == "paid"
    assert log.run("pay-1", lambda: "paid again") == "paid"


def test_an_effect_that_raised_is_in_doubt(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")

    def flaky() -> str:
        raise TimeoutError("the payment API timed out: did it charge?")

    with pytest.raises(TimeoutError):
        log.run("pay-2", flaky)
    with pytest.raises(InDoubtEffect):
        log.run("pay-2", lambda: "ok")


def test_non_json_result_is_refused_and_left_in_doubt(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    with pytest.raises(TypeError, match="not JSON"):
        log.run("k", lambda: object())
    with pytest.raises(InDoubtEffect):
        log.run("k", lambda: 1)


def test_reentrant_same_key_is_refused(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    with pytest.raises(InDoubtEffect, match="running right now"):
        log.run("k", lambda: log.run("k", lambda: 1))


def test_recorded_tool_calls_replay_their_answers(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    answers = iter(["first answer", "different answer"])
    assert log.record_call("llm-step-3", lambda: next(answers)) == "first answer"
    log.close()
    log = SideEffectLog(tmp_path / "effects.db")
    assert log.record_call("llm-step-3", lambda: next(answers)) == "first answer"


def test_output_commit_holds_effects_until_stable(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    sent: list[int] = []
    stable = {4: False, 6: False}
    assert log.hold_until_stable("out-1", lambda: sent.append(1) or "r1", lambda: stable[4]) is None
    assert log.hold_until_stable("out-2", lambda: sent.append(2) or "r2", lambda: stable[6]) is None
    assert log.release() == {} and sent == []
    stable[4] = True
    assert log.release() == {"out-1": "r1"} and sent == [1]
    assert log.discard_held() == ["out-2"]  # rolled back: out-2 belonged to undone work
    stable[6] = True
    assert log.release() == {} and sent == [1]
    assert log.hold_until_stable("out-1", lambda: sent.append(99), lambda: True) == "r1"  # replay
    assert log.hold_until_stable("out-3", lambda: sent.append(3) or "r3", lambda: True) == "r3"
    assert sent == [1, 3]


def test_held_keys_survive_a_restart(tmp_path: Path) -> None:
    log = SideEffectLog(tmp_path / "effects.db")
    log.hold_until_stable("out-9", lambda: "x", lambda: False)
    log.close()
    log = SideEffectLog(tmp_path / "effects.db")
    assert log.held_keys() == ["out-9"]  # the function is gone: the agent must re-submit it
    assert log.hold_until_stable("out-9", lambda: "sent", lambda: True) == "sent"
    assert log.held_keys() == []
