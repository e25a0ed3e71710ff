"""The short path (agent_client.connect / connect_async) against the in-process coordinator."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_client import testing
from agent_client.aio_session import connect_async
from agent_client.session import connect
from agent_client.group_spec import GroupNotFound, MODES, mode_value
from coordinator.api.v1 import coordinator_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def coordinator():
    with testing.coordinator() as running:
        yield running


def test_mode_names_cover_every_mode_and_refuse_the_rest() -> None:
    assert set(MODES.values()) == set(pb.GroupMode.values()) - {pb.GROUP_MODE_UNSPECIFIED}
    with pytest.raises(ValueError, match="needs mode="):
        mode_value(None)
    with pytest.raises(ValueError, match="unknown mode 'cic'"):
        mode_value("cic")


def test_creating_a_group_without_a_mode_is_refused_and_creates_nothing(coordinator, tmp_path: Path) -> None:
    with connect(coordinator.address, tls=coordinator.client_tls(), data_dir=tmp_path) as rp:
        with pytest.raises(ValueError, match="mode"):
            rp.group("modeless", create=True)
        with pytest.raises(GroupNotFound, match="create=True"):
            rp.group("modeless")
        assert rp.group("modeless", mode="hmnr", create=True).mode == pb.CIC_HMNR
        assert rp.group("modeless").mode == pb.CIC_HMNR  # found without create, same mode
        with pytest.raises(ValueError, match="exists in mode 'hmnr', not 'bcs'"):
            rp.group("modeless", mode="bcs")


@pytest.mark.slow
def test_the_quickstart_runs_as_written() -> None:
    # A process of its own: `from agent_client import connect` as a user writes it.
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "{'notes': ['outline the report']}\n"


@pytest.mark.slow
def test_a_rollback_gives_back_the_state_and_the_messages_it_took(coordinator, tmp_path: Path) -> None:
    with connect(coordinator.address, tls=coordinator.client_tls(), data_dir=tmp_path) as rp:
        group = rp.group("rollback", mode="bcs", create=True)
        with group.agent("a", state={"n": 0}) as a, group.agent("b", state={"got": 0}) as b:
            b.checkpoint({"got": 0})
            with b.atomic():
                assert b.receive(a.send(b"m", to="b")) == b"m"
                b.state = {"got": 1}
            # b crashes before checkpointing the delivery: its replacement restarts from
            # checkpoint 1 and re-delivers the message from its own log.
            with group.agent("b", state={"got": 0}) as again:
                assert again.state == {"got": 0}
                assert again.take_redelivered() == [("a", b"m")]
                assert again.take_redelivered() == []


@pytest.mark.slow
async def test_the_async_short_path_matches_the_blocking_one(coordinator, tmp_path: Path) -> None:
    async with connect_async(coordinator.address, tls=coordinator.client_tls(), data_dir=tmp_path) as rp:
        group = await rp.group("async-team", mode="uncoordinated", create=True)
        async with group.agent("planner", state={"step": 0}) as me:
            envelope = me.send(b"x", to="writer")  # local: not a coroutine
            assert isinstance(envelope, bytes)
            assert await me.checkpoint({"step": 1}) == 1
        async with group.agent("planner", state={"step": 0}) as again:
            assert again.state == {"step": 1}
        with pytest.raises(GroupNotFound):
            await rp.group("async-missing")


def test_the_testing_coordinator_writes_nothing_to_the_users_output() -> None:
    code = ("from agent_client import connect, testing\n"
            "from agent_client.group_spec import GroupNotFound\n"
            "with testing.coordinator() as c, connect(c.address, data_dir='unused', tls=c.client_tls()) as rp:\n"
            "    try:\n"
            "        rp.group('missing')\n"
            "    except GroupNotFound:\n"
            "        pass\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")
