"""Refusals that come in floods are logged as one line per interval with their count."""
from __future__ import annotations

import pytest

from coordinator.observability import raft_log
from coordinator.observability.log_tally import LogTally
from coordinator.observability.logging import configure_logging
from coordinator.replication import pysyncobj_adapter


def test_one_line_per_interval_says_how_many_since_the_last() -> None:
    lines: list[dict[str, object]] = []
    now = [0.0]
    tally = LogTally(lambda event, **fields: lines.append({"event": event, **fields}), "refused", interval_s=10.0,
                     clock=lambda: now[0])
    for i in range(3000):  # 100 a second for 30 s
        now[0] = i / 100
        tally.note("idle" if i % 2 else "oversized", f"connection {i}")
    now[0] = 31.0
    tally.flush()
    assert [line["count"] for line in lines] == [1, 1000, 1000, 999]  # the first at once, then per interval
    assert lines[1]["by_kind"] == {"idle": 500, "oversized": 500} and lines[-1]["latest"] == "connection 2999"
    tally.flush()
    assert len(lines) == 4  # nothing pending: nothing written


def test_refused_raft_connections_do_not_flood_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")  # its handler writes to the stderr this test captures
    limits = pysyncobj_adapter.RaftPortLimits(on_refused=raft_log.connection_refused)
    for i in range(500):
        conn = pysyncobj_adapter.GuardedConnection(poller=None)
        conn.limits = limits
        conn.refuse("idle", f"did not authenticate within 5 s ({i})")
    lines = [line for line in capsys.readouterr().err.splitlines() if "Raft connection" in line]
    assert len(lines) <= 1, f"{len(lines)} log lines for 500 refused connections, e.g. {lines[:2]}"
