"""The no-healthy-agent-declared-failed invariant on hand-made flood notes."""
from __future__ import annotations

from typing import Any

from chaos import checker
from chaos.history import INFO, Op
from chaos.invariants import false_failures
from chaos.invariants.facts import Facts
from chaos.workloads.flood import FLOOD_GROUP, FLOOD_RUN, PROCESS

TTL = 10.0


def agent(reg: float | None = 1.0, beats: tuple[float, ...] = (), refused: tuple[float, str] | None = None,
          state: str | None = "ALIVE", denied: tuple[float, ...] = ()) -> dict[str, Any]:
    return {"reg": reg, "beats": list(beats), "denied": list(denied), "refused": list(refused) if refused else None,
            "state": state}


def flood(agents: dict[str, dict[str, Any]], *, read_at: float | None = 40.0,
          outcomes: dict[str, int] | None = None, ttl: float = TTL) -> list[Op]:
    return [Op(0, read_at or 40.0, PROCESS, INFO, FLOOD_GROUP,
               {"group": "flood-0", "lease_ttl_s": ttl, "read_at": read_at, "agents": agents}),
            Op(1, 41.0, PROCESS, INFO, FLOOD_RUN, {"agents": len(agents), "outcomes": outcomes or {}})]


def judged(ops: list[Op]):
    return false_failures.check(Facts(ops))


def test_heartbeating_agents_alive_at_the_end_hold_and_are_counted() -> None:
    result = judged(flood({"agent-0": agent(beats=(4.0, 7.3, 10.6)), "agent-1": agent(beats=(5.0,))},
                          outcomes={"Heartbeat OK": 4, "Heartbeat SHED": 7, "Register SHED": 2}))
    assert result.ok, result.examples
    assert result.counts == {"agents_registered": 2, "heartbeats_answered": 4, "heartbeats_denied": 0,
                             "shed_answers": 9, "failed": 0, "excused_silent": 0, "false_failures": 0}


def test_an_agent_read_failed_soon_after_an_answered_beat_is_a_false_failure() -> None:
    result = judged(flood({"agent-0": agent(beats=(20.0, 33.0), state="FAILED")}, read_at=40.0))
    assert not result.ok and result.counts["false_failures"] == 1
    assert "agent-0 of flood-0 read as FAILED at 40.000s, 7.000s after" in result.examples[0]["why"]


def test_a_not_live_refusal_soon_after_an_answered_beat_is_a_false_failure() -> None:
    # The beats after the refusal do not matter (there are none: the agent stops), the
    # one before it does; it counts once even though it is FAILED at the end as well.
    result = judged(flood({"agent-0": agent(beats=(3.0, 6.3), refused=(9.7, "AGENT_NOT_ALIVE"), state="FAILED")}))
    assert not result.ok and result.violations == 1 and result.counts["false_failures"] == 1
    assert "refused as AGENT_NOT_ALIVE at 9.700s, 3.400s after" in result.examples[0]["why"]


def test_a_registration_is_a_renewal_too() -> None:
    result = judged(flood({"agent-0": agent(reg=35.0, beats=(), state="FAILED")}, read_at=40.0))
    assert not result.ok and result.counts["false_failures"] == 1


def test_an_agent_failed_while_its_heartbeats_were_refused_for_authorization_is_a_false_failure() -> None:
    """A broken auth file that a node stopped honouring: the agent kept beating, its
    beats were refused, and its lease ran out. It was not silent."""
    beating = agent(beats=(3.0, 4.3), denied=(5.6, 6.9, 8.2), refused=(9.0, "AGENT_NOT_ALIVE"), state="FAILED")
    result = judged(flood({"agent-0": beating}, ttl=4.0))
    assert not result.ok and result.counts["false_failures"] == 1 and result.counts["heartbeats_denied"] == 3
    assert "refused as AGENT_NOT_ALIVE at 9.000s, 0.800s after" in result.examples[0]["why"]
    # Without the refused beats it was silent for longer than its lease: excused.
    result = judged(flood({"agent-0": {**beating, "denied": []}}, ttl=4.0))
    assert result.ok and result.counts["excused_silent"] == 1


def test_a_silence_of_a_lease_or_more_excuses_the_failure() -> None:
    result = judged(flood({
        "agent-0": agent(beats=(3.0, 6.3, 9.6), refused=(19.6, "AGENT_NOT_ALIVE"), state="FAILED"),  # 10.0 s
        "agent-1": agent(reg=2.0, beats=(), state="FAILED"),  # registered, never a beat answered
        "agent-2": agent(beats=(3.0, 25.0), state="FAILED"),  # read 15 s after its last beat
    }, read_at=40.0))
    assert result.ok, result.examples
    assert result.counts["failed"] == 3 and result.counts["excused_silent"] == 3
    assert result.counts["false_failures"] == 0


def test_only_beats_sent_before_the_failure_count() -> None:
    # A beat "answered" after the refusal cannot have renewed the failed incarnation's lease.
    result = judged(flood({"agent-0": agent(beats=(3.0, 25.0), refused=(20.0, "STALE_INCARNATION"))}))
    assert result.ok and result.counts["excused_silent"] == 1


def test_an_acknowledged_agent_missing_from_the_final_read_is_a_violation() -> None:
    result = judged(flood({"agent-0": agent(beats=(30.0,), state="MISSING")}))
    assert not result.ok and result.counts["missing"] == 1
    # A read that failed judges nothing but refusals (the run's notes say it failed).
    assert judged(flood({"agent-0": agent(beats=(30.0,), state=None)}, read_at=None)).ok


def test_without_a_flood_it_holds_with_zero_counts_and_the_checker_reports_it() -> None:
    result = judged([])
    assert result.ok and result.counts == {"agents_registered": 0, "heartbeats_answered": 0, "heartbeats_denied": 0,
                                           "shed_answers": 0, "failed": 0, "excused_silent": 0, "false_failures": 0}
    assert checker.check([]).result(false_failures.NAME).ok
    report = checker.check(flood({"agent-0": agent(beats=(35.0,), state="FAILED")}))
    assert false_failures.NAME in report.failed(), report.table()
