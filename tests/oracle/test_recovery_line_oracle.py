"""Every recovery-line function against the brute-force definitions."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import recovery_line as rl
from coordinator.core.history import EventLog
from tests.oracle import brute_force as bf
from tests.oracle.strategies import histories

SETTINGS = settings(max_examples=400, deadline=None)


@pytest.mark.slow
@SETTINGS
@given(histories(), st.data())
def test_recovery_line_is_the_maximum_consistent_cut(history, data) -> None:
    agents = sorted(history.checkpoints)
    failed = set(data.draw(st.lists(st.sampled_from(agents), min_size=1, unique=True)))
    line = rl.recovery_line(history, failed)
    expected = bf.recovery_line(history, failed)
    assert expected is not None  # the all-initial cut is consistent, so a maximum exists
    assert line.cut == expected
    assert bf.consistent(history, line.cut) and not rl.orphans(history, line.cut)
    assert line.rolled_back == {a for a, c in expected.items() if c is not None}


@SETTINGS
@given(histories())
def test_useless_checkpoints_are_exactly_those_in_no_consistent_cut(history) -> None:
    every = {(a, c) for a, cps in history.checkpoints.items() for c in cps}
    assert rl.useless_checkpoints(history) == every - bf.useful(history)


@SETTINGS
@given(histories(), st.data())
def test_min_and_max_consistent_cuts_containing_a_checkpoint(history, data) -> None:
    agent = data.draw(st.sampled_from(sorted(history.checkpoints)))
    index = data.draw(st.sampled_from(history.checkpoints[agent]))
    cuts = bf.containing(history, {agent: index})
    assert rl.max_consistent_containing(history, {agent: index}) == bf.maximum(cuts)
    assert rl.min_consistent_containing(history, {agent: index}) == bf.minimum(cuts)


@SETTINGS
@given(histories())
def test_orphans_and_in_transit_match_definitions(history) -> None:
    line = rl.recovery_line(history, set(history.checkpoints)).cut
    for cut in (line, {a: cps[-1] for a, cps in history.checkpoints.items()}):
        for m in history.messages:
            received = bf._in(cut[m.receiver], m.receive_interval)
            sent = bf._in(cut[m.sender], m.send_interval)
            assert (m in rl.orphans(history, cut)) == (received and not sent)
            assert (m in rl.in_transit(history, cut)) == (sent and not received)


@SETTINGS
@given(histories(), st.data())
def test_gc_watermark_never_deletes_a_checkpoint_some_failure_needs(history, data) -> None:
    keep = rl.gc_watermark(history)
    agents = sorted(history.checkpoints)
    failed = set(data.draw(st.lists(st.sampled_from(agents), min_size=1, unique=True)))
    line = rl.recovery_line(history, failed).cut
    for agent, c in line.items():
        assert c is None or c >= keep[agent]


def test_classic_domino_effect_reaches_the_initial_state() -> None:
    """Each checkpoint is taken right after a receive whose send the partner's next
    checkpoint does not cover: losing both agents rolls everything back to the start."""
    log = EventLog(["p", "q"])
    for i in range(3):
        log.send("p", f"pq{i}")
        log.receive("q", f"pq{i}")
        log.checkpoint("q")
        log.send("q", f"qp{i}")
        log.receive("p", f"qp{i}")
        log.checkpoint("p")
    history = log.history()
    assert rl.recovery_line(history, {"p", "q"}).cut == {"p": 0, "q": 0}
    assert rl.recovery_line(history, {"p", "q"}).cut == bf.recovery_line(history, {"p", "q"})


def test_z_cycle_makes_a_checkpoint_useless() -> None:
    """q sends m1 and later, in the same interval, receives m2; p receives m1, checkpoints,
    then sends m2. The Z-path m2 -> m1 leads from p's checkpoint back to itself."""
    log = EventLog(["p", "q"])
    log.send("q", "m1")
    log.receive("p", "m1")
    log.checkpoint("p")
    log.send("p", "m2")
    log.receive("q", "m2")
    log.checkpoint("q")
    history = log.history()
    assert rl.useless_checkpoints(history) == {("p", 1)}
    assert ("p", 1) not in bf.useful(history)
