"""The dedupe window's pure rules: a monotone clock and watermark, and what they admit."""
from __future__ import annotations

from coordinator.core import dedupe
from coordinator.core.dedupe import DedupeClock
from coordinator.core.errors import Code


def test_clock_and_watermark_never_go_back() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert (c.clock_ms, c.watermark_ms) == (1_000_000, 940_000)
    behind = dedupe.advance(c, 900.0, 60.0)  # a new leader whose clock is behind
    assert behind == c
    narrower_then_wider = dedupe.advance(dedupe.advance(c, 1000.0, 10.0), 1001.0, 600.0)
    assert narrower_then_wider.watermark_ms == 990_000  # a wider window later never lowers it
    assert dedupe.advance(c, 2000.0, 0.0).watermark_ms == c.watermark_ms  # no window: no forgetting
    assert dedupe.advance(c, float("nan"), 60.0) == c


def test_admit_refuses_requests_older_than_the_watermark() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.admit(c, 940_000, 60.0) is None  # exactly at the watermark: still remembered
    refusal = dedupe.admit(c, 939_999, 60.0)
    assert refusal is not None and refusal.code is Code.FAILED_PRECONDITION
    assert "too old to deduplicate" in refusal.reason and refusal.field == "issued_at"


def test_admit_refuses_requests_from_far_in_the_future() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.admit(c, 1_060_000, 60.0) is None
    refusal = dedupe.admit(c, 1_060_001, 60.0)
    assert refusal is not None and refusal.code is Code.INVALID_ARGUMENT and refusal.field == "issued_at"


def test_only_what_the_watermark_passed_is_forgettable() -> None:
    c = dedupe.advance(DedupeClock(), 1000.0, 60.0)
    assert dedupe.forgettable(c, 939_999) and not dedupe.forgettable(c, 940_000)


def test_a_forgotten_request_is_always_refused() -> None:
    """Whatever the sequence of proposal times and windows: once the watermark has
    passed a request (so its answer may be forgotten), that request is refused."""
    import random

    rng = random.Random(7)
    clock = DedupeClock()
    issued = 500_000
    forgotten_at = None
    for step in range(2000):
        clock = dedupe.advance(clock, rng.uniform(0, 2000), rng.choice([0.0, 10.0, 60.0, 600.0]))
        if forgotten_at is None and dedupe.forgettable(clock, issued):
            forgotten_at = step
        if forgotten_at is not None:
            assert dedupe.admit(clock, issued, 600.0) is not None
    assert forgotten_at is not None


def test_pruning_outpaces_recording() -> None:
    assert dedupe.prune_budget(0) >= 1
    assert all(dedupe.prune_budget(n) > n for n in (1, 10, 256))
