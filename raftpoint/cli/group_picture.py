"""`raftpoint group show G --svg FILE` / `--html FILE`: the group's space-time diagram
(raftpoint.cli.spacetime) drawn from what the coordinator holds, read through the
leader (GetGroup, ListCheckpoints, WhatIf as `group show` reads them, plus
ListDependencies and ListSavepoints), and written atomically: a reader of FILE sees
the old picture or the new one, never half of one."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.history import Dependency, History, HistoryError
from coordinator.core.recovery_line import useless_checkpoints
from coordinator.fsutil import atomic_write
from coordinator.wire import dependency_from_pb
from raftpoint.cli import group_view, spacetime, target
from raftpoint.cli.output import enum_word

PROG = "raftpoint group show"
PICTURE_MODE = 0o644
KIND_OF = {pb.BASIC: "basic", pb.FORCED: "forced", pb.COORDINATED_CUT: "coordinated", pb.INITIAL: "initial"}


def add_flags(show: argparse.ArgumentParser) -> None:
    show.add_argument("--svg", type=Path, metavar="FILE", help="write the group's space-time diagram to FILE as SVG")
    show.add_argument("--html", type=Path, metavar="FILE", help="write it as a web page holding the SVG")


def wanted(args: argparse.Namespace) -> bool:
    return args.svg is not None or args.html is not None


@dataclass(frozen=True)
class GroupHistory:
    """What the picture shows beyond `group show`'s view: the reported messages, the savepoints."""
    view: group_view.GroupView
    dependencies: Sequence[pb.DependencyRecord]
    savepoints: Sequence[pb.Savepoint]


def read_history(conn: Connection, name: str) -> GroupHistory:
    view = group_view.read_group(conn, name)
    _, dependencies = target.every_page(conn, "ListDependencies", pb.ListDependenciesRequest(group=name),
                                        "dependencies")
    _, savepoints = target.every_page(conn, "ListSavepoints", pb.ListSavepointsRequest(group=name), "savepoints")
    return GroupHistory(view, dependencies, savepoints)


def useless(checkpoints: Sequence[pb.CheckpointMeta], messages: Sequence[Dependency],
            agents: Sequence[str]) -> set[tuple[str, int]]:
    """The checkpoints on a Z-cycle among those still held: in no consistent global
    checkpoint the coordinator could still roll back to (Netzer and Xu). None when the
    records do not make a history (a message from an agent no longer listed: nothing
    is claimed then)."""
    indexes: dict[str, list[int]] = {a: [] for a in agents}
    for cp in checkpoints:
        indexes.setdefault(cp.agent_id, []).append(cp.index)
    try:
        history = History.from_dependencies({a: sorted(i) for a, i in indexes.items()}, messages)
    except HistoryError:
        return set()
    return useless_checkpoints(history)


def picture(history: GroupHistory) -> spacetime.Picture:
    """The diagram's plain values from the API's answers (pure)."""
    view, g = history.view, history.view.group
    lanes = [spacetime.Lane(a.agent_id, enum_word(pb.AgentState, a.state, "AGENT_")) for a in view.agents]
    messages = [dependency_from_pb(d) for d in history.dependencies]
    on_z_cycle = useless(view.checkpoints, messages, [lane.agent for lane in lanes])
    marks = [spacetime.Mark(cp.agent_id, cp.index, KIND_OF.get(cp.kind, "basic"), cp.stable,
                            (cp.agent_id, cp.index) in on_z_cycle) for cp in view.checkpoints]
    line = spacetime.Cut("recovery line", {t.agent_id: t.checkpoint_index for t in view.recovery_line})
    savepoints = [spacetime.Cut(f"savepoint {s.name}", {c.agent_id: c.index for c in s.checkpoints})
                  for s in history.savepoints]
    title = (f"group {g.spec.group}: mode {group_view.mode_word(g.spec.mode)}, "
             f"{enum_word(pb.GroupState, g.state)}, stable epoch {g.stable_epoch}")
    return spacetime.Picture(title, lanes, marks, messages, line if line.points else None, savepoints)


def write(args: argparse.Namespace, drawn: spacetime.Picture) -> list[Path]:
    """The files asked for, each written whole or not at all."""
    written = []
    for path, text in ((args.svg, spacetime.svg), (args.html, lambda p: spacetime.html_page([p]))):
        if path is not None:
            save(path, text(drawn))
            written.append(path)
    return written


def save(path: Path, text: str) -> None:
    """Whole or not at all; readable by others, like any file a user writes."""
    atomic_write(path, text.encode(), mode=PICTURE_MODE)


def problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the files asked for, found before the cluster is asked."""
    if args.json:
        return "--json prints the group; --svg and --html draw it: give one or the other"
    if args.svg is not None and args.svg == args.html:
        return "--svg and --html name the same file"
    return next((wrong for wrong in map(unwritable, (args.svg, args.html)) if wrong), None)


def unwritable(path: Path | None) -> str | None:
    """Why a picture cannot be written at `path` (None: it can be tried, or no path)."""
    if path is not None and not path.parent.is_dir():
        return f"cannot write {path}: {path.parent} is not a directory"
    if path is not None and path.is_dir():
        return f"cannot write {path}: it is a directory"
    return None


def run(args: argparse.Namespace) -> int:
    wrong = problem(args)
    if wrong:
        print(f"{PROG}: {wrong}", file=sys.stderr)
        return 2
    history, code = target.admin_calls(args, PROG, lambda conn: read_history(conn, args.name))
    if code:
        return code
    drawn = picture(history)
    try:
        written = write(args, drawn)
    except OSError as exc:
        print(f"{PROG}: cannot write the picture: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{len(items)} {word}{'' if len(items) == 1 else 's'}" for items, word in (
        (drawn.lanes, "agent"), (drawn.marks, "checkpoint"), (drawn.messages, "message"),
        (drawn.savepoints, "savepoint")))
    for path in written:
        print(f"wrote the picture of group {args.name} to {path} ({counts})")
    return 0
