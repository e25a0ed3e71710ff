"""What the HTTP probes answer from the node's last health report."""
from __future__ import annotations

from coordinator.observability.health_report import LIVE_PATH, READY_PATH, STARTING, HealthReport, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_before_the_first_report_both_probes_fail_as_starting() -> None:
    report = HealthReport(Clock())
    assert report.verdict(READY_PATH) == STARTING and report.verdict(LIVE_PATH) == STARTING
    assert STARTING.status == (503, "Service Unavailable")


def test_each_path_answers_its_own_verdict_and_other_paths_none() -> None:
    report = HealthReport(Clock())
    report.publish(Verdict(False, "no leader known"), Verdict(True, "live"))
    assert report.verdict(READY_PATH) == Verdict(False, "no leader known")
    assert report.verdict(LIVE_PATH).status == (200, "OK")
    assert report.verdict("/metrics") is None


def test_a_report_older_than_the_bound_fails_both_probes() -> None:
    clock = Clock()
    report = HealthReport(clock, stale_after_s=5.0)
    report.publish(Verdict(True, "ready"), Verdict(True, "live"))
    clock.now += 5.0
    assert report.verdict(LIVE_PATH).ok, "at the bound the report still counts"
    clock.now += 0.5
    for path in (READY_PATH, LIVE_PATH):
        stale = report.verdict(path)
        assert not stale.ok and "stalled" in stale.reason, stale
