from __future__ import annotations

from pathlib import Path

import pytest

from agent_client.delivery_log import DeliveryLog, DeliveryLogCorrupted, LoggedDelivery
from agent_client.envelope import Envelope


def entry(sender: str, seq: int, after: int, payload: bytes = b"p") -> LoggedDelivery:
    env = Envelope(f"{sender}.1.{seq}", sender, "me", 1, seq, 2, 0, b"", payload)
    return LoggedDelivery.of(after, env, env.encode())


def fill(log: DeliveryLog) -> list[LoggedDelivery]:
    entries = [entry("a", 1, 2, b"\x00one\n"), entry("b", 1, 2), entry("a", 2, 3)]
    for e in entries:
        log.append(e)
    return entries


def ids(entries: list[LoggedDelivery]) -> list[str]:
    return [e.envelope.message_id for e in entries]


@pytest.mark.parametrize("fsync", [False, True])
def test_since_a_checkpoint_in_delivery_order_and_across_restarts(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "deliveries.jsonl"
    log = DeliveryLog(path, fsync=fsync)
    fill(log)
    assert ids(log.since(2)) == ["a.1.1", "b.1.1", "a.1.2"] and ids(log.since(3)) == ["a.1.2"]
    reopened = DeliveryLog(path)  # what a restarted agent finds
    assert ids(reopened.since(0)) == ["a.1.1", "b.1.1", "a.1.2"]
    assert reopened.since(2)[0].envelope.payload == b"\x00one\n"
    assert Envelope.decode(reopened.since(2)[0].raw) == reopened.since(2)[0].envelope


def test_memory_log_without_a_path() -> None:
    log = DeliveryLog(None)
    entries = fill(log)
    log.drop(entries[:1])
    assert ids(log.since(0)) == ["b.1.1", "a.1.2"] and len(log) == 2


def test_torn_last_record_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.jsonl"
    fill(DeliveryLog(path))
    with open(path, "ab") as f:
        f.write(b'{"after":3,"env":[2,"c.1.1","c","me",1,1,2,0,"","cGF5')  # crash mid-append
    log = DeliveryLog(path)
    assert ids(log.since(0)) == ["a.1.1", "b.1.1", "a.1.2"]
    log.append(entry("c", 1, 3))
    assert ids(DeliveryLog(path).since(3)) == ["a.1.2", "c.1.1"]


def test_damage_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.jsonl"
    fill(DeliveryLog(path))
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DeliveryLogCorrupted, match="record 2"):
        DeliveryLog(path)


def test_drop_and_truncate_rewrite_the_file(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.jsonl"
    log = DeliveryLog(path)
    entries = fill(log)
    log.drop([entries[1]])
    assert ids(DeliveryLog(path).since(0)) == ["a.1.1", "a.1.2"]
    log.append(entry("b", 1, 3))  # appends after a rewrite land in the new file
    assert log.truncate(3) == 1
    assert ids(DeliveryLog(path).since(0)) == ["a.1.2", "b.1.1"]
    assert log.truncate(3) == 0
