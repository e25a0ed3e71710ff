"""`raftpoint group show G --svg/--html`: the API's records as the diagram's values (a
checkpoint on a Z-cycle marked useless), and bad flags refused before any call."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli.group_picture import GroupHistory, picture
from raftpoint.cli.group_view import GroupView
from raftpoint.cli.main import main as raftpoint


def checkpoint(agent: str, index: int, kind: int = pb.BASIC, stable: bool = True) -> pb.CheckpointMeta:
    return pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=kind, stable=stable)


def history() -> GroupHistory:
    """p sent m1 after its checkpoint 1, q received it before its own and answered with
    m2, received by p before its checkpoint 1: a Z-cycle through p's checkpoint 1."""
    cps = [checkpoint("p", 1), checkpoint("q", 1, pb.FORCED, stable=False), checkpoint("q", 3, pb.COORDINATED_CUT)]
    view = GroupView(pb.Group(spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED), state=pb.RUNNING),
                     [pb.Agent(agent_id="p", state=pb.AGENT_ALIVE), pb.Agent(agent_id="q", state=pb.AGENT_FAILED)],
                     cps, {}, {}, [pb.RollbackTarget(agent_id="p", checkpoint_index=0),
                                   pb.RollbackTarget(agent_id="q", checkpoint_index=3)])
    deps = [pb.DependencyRecord(sender="p", send_interval=2, receiver="q", receive_interval=1, message_id="m1"),
            pb.DependencyRecord(sender="q", send_interval=1, receiver="p", receive_interval=1, message_id="m2")]
    return GroupHistory(view, deps, [pb.Savepoint(name="s1", checkpoints=[pb.SavedCheckpoint(agent_id="p", index=0),
                                                                          pb.SavedCheckpoint(agent_id="q", index=1)])])


def test_the_api_records_become_the_pictures_values() -> None:
    drawn = picture(history())
    assert [(lane.agent, lane.note) for lane in drawn.lanes] == [("p", "alive"), ("q", "failed")]
    assert [(m.agent, m.index, m.kind, m.stable, m.useless) for m in drawn.marks] == [
        ("p", 1, "basic", True, True), ("q", 1, "forced", False, False), ("q", 3, "coordinated", True, False)]
    assert [(m.sender, m.receiver, m.message_id) for m in drawn.messages] == [("p", "q", "m1"), ("q", "p", "m2")]
    assert drawn.recovery_line.points == {"p": 0, "q": 3}
    assert [(s.name, dict(s.points)) for s in drawn.savepoints] == [("savepoint s1", {"p": 0, "q": 1})]
    assert drawn.title.startswith("group g: mode uncoordinated, running")


def test_records_that_make_no_history_mark_nothing_useless() -> None:
    """A message from an agent the group no longer lists: no Z-cycle is claimed."""
    h = history()
    stray = pb.DependencyRecord(sender="gone", send_interval=1, receiver="p", receive_interval=1, message_id="m9")
    drawn = picture(GroupHistory(h.view, [*h.dependencies, stray], h.savepoints))
    assert not any(m.useless for m in drawn.marks) and len(drawn.messages) == 3


@pytest.mark.parametrize("flags, words", [
    (["--svg", "{d}/missing/x.svg"], "is not a directory"),
    (["--svg", "{d}"], "it is a directory"),
    (["--svg", "{d}/x", "--html", "{d}/x"], "the same file"),
    (["--svg", "{d}/x.svg", "--json"], "give one or the other"),
])
def test_bad_files_are_refused_before_the_cluster_is_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           flags: list[str], words: str) -> None:
    args = [f.format(d=tmp_path) for f in flags]
    assert raftpoint(["group", "show", "g", *args, "--endpoints", "127.0.0.1:9"]) == 2
    captured = capsys.readouterr()
    assert words in captured.err and len(captured.err.splitlines()) == 1 and not captured.out, captured
    assert list(tmp_path.iterdir()) == []
