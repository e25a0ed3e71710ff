from __future__ import annotations

from pathlib import Path

import pytest

from agent_client.channel_log import ChannelLog, ChannelLogCorrupted


def fill(log: ChannelLog) -> None:
    log.record("a.1", "a", b"\x00one", epoch=3, after_checkpoint=2)
    log.record("b.1", "b", b"two", epoch=4, after_checkpoint=2)
    log.record("a.2", "a", b"three", epoch=4, after_checkpoint=3)


def test_replay_after_a_checkpoint_in_receive_order(tmp_path: Path) -> None:
    log = ChannelLog(tmp_path / "channel.jsonl")
    fill(log)
    assert [m.message_id for m in log.replay(2)] == ["a.1", "b.1", "a.2"]
    assert [m.message_id for m in log.replay(3)] == ["a.2"]
    assert [m.message_id for m in log.replay(2, sent_before_epoch=4)] == ["a.1"]
    assert log.replay(2)[0].payload == b"\x00one"


def test_survives_restart_and_deduplicates(tmp_path: Path) -> None:
    path = tmp_path / "channel.jsonl"
    fill(ChannelLog(path))
    log = ChannelLog(path)
    assert len(log) == 3
    assert log.record("a.1", "a", b"dup", epoch=3, after_checkpoint=2) is False
    assert len(ChannelLog(path)) == 3


def test_torn_last_record_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "channel.jsonl"
    fill(ChannelLog(path))
    with open(path, "ab") as f:
        f.write(b'{"after":3,"epoch":5,"from":"c","id":"c.1","payl')  # crash mid-append
    log = ChannelLog(path)
    assert [m.message_id for m in log.replay(0)] == ["a.1", "b.1", "a.2"]
    log.record("c.1", "c", b"again", epoch=5, after_checkpoint=3)
    assert [m.message_id for m in ChannelLog(path).replay(3)] == ["a.2", "c.1"]


def test_damage_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "channel.jsonl"
    fill(ChannelLog(path))
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ChannelLogCorrupted, match="record 2"):
        ChannelLog(path)


def test_truncate_on_stable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "channel.jsonl"
    log = ChannelLog(path)
    fill(log)
    assert log.truncate(3) == 2
    assert [m.message_id for m in ChannelLog(path).replay(0)] == ["a.2"]
    assert log.truncate(3) == 0
    assert log.record("b.1", "b", b"two", epoch=4, after_checkpoint=3) is True  # dropped ids may recur
