"""Logs are one JSON object per line, with the bound request id, for ours and stdlib loggers."""
from __future__ import annotations

import json
import logging
from typing import Callable, Iterator

import pytest
import structlog

from coordinator.observability.logging import configure_logging, request_context


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[dict]]]:
    """Tests call configure_logging themselves: its handler binds sys.stderr as it is
    then, and only inside the test body is that capsys's stream."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level

    def lines() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]

    yield lines
    root.handlers[:], level = saved
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_structlog_line_has_request_id(json_logs) -> None:
    configure_logging("debug")
    with request_context("req-123", rpc="CommitCheckpoint"):
        structlog.get_logger("raftpoint.test").info("checkpoint committed", index=4)
    structlog.get_logger("raftpoint.test").info("after the request")
    inside, outside = json_logs()
    assert inside["event"] == "checkpoint committed" and inside["index"] == 4
    assert inside["request_id"] == "req-123" and inside["rpc"] == "CommitCheckpoint"
    assert inside["level"] == "info" and inside["logger"] == "raftpoint.test" and "timestamp" in inside
    assert "request_id" not in outside


def test_stdlib_logging_goes_through_the_same_pipeline(json_logs) -> None:
    configure_logging("debug")
    with request_context("req-456"):
        logging.getLogger("pysyncobj.syncobj").warning("leader changed to %s", "127.0.0.1:7001")
    [event] = json_logs()
    assert event["event"] == "leader changed to 127.0.0.1:7001"
    assert event["level"] == "warning" and event["logger"] == "pysyncobj.syncobj"
    assert event["request_id"] == "req-456" and "timestamp" in event


def test_level_filters(json_logs) -> None:
    configure_logging("warning")
    logging.getLogger("pysyncobj").info("chatty")
    structlog.get_logger("raftpoint").warning("kept")
    assert [e["event"] for e in json_logs()] == ["kept"]
