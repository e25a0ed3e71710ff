"""`raftpoint group list` and `raftpoint group show G`: what the coordinator holds about
groups, read through the leader (GetGroup, ListCheckpoints, WhatIf, ListGroups)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from agent_client.connection import Connection
from agent_client.group_spec import MODES
from coordinator.api.v1 import coordinator_pb2 as pb
from raftpoint.cli import target
from raftpoint.cli.output import enum_word, plain, print_json, print_table, utc

PROG = "raftpoint group"


def mode_word(mode: int) -> str:
    """A mode as `raftpoint group create --mode` names it."""
    return next((name for name, value in MODES.items() if value == mode), str(mode))


def run_list(args: argparse.Namespace) -> int:
    groups, code = target.admin_calls(
        args, f"{PROG} list", lambda conn: target.every_page(conn, "ListGroups", pb.ListGroupsRequest(), "groups")[1])
    if code:
        return code
    if args.json:
        print_json([plain(g) for g in groups])
        return 0
    print_table(("GROUP", "MODE", "STATE", "STABLE EPOCH", "MEMBERS", "CREATED"),
                [(g.spec.group, mode_word(g.spec.mode), enum_word(pb.GroupState, g.state), g.stable_epoch,
                  len(g.members), utc(g.created_at)) for g in groups])
    return 0


@dataclass(frozen=True)
class GroupView:
    group: pb.Group
    agents: list[pb.Agent]
    checkpoints: list[pb.CheckpointMeta]  # every one held, by (agent, index)
    # Per member with a checkpoint: its newest, and its newest stable one.
    latest: dict[str, pb.CheckpointMeta]
    latest_stable: dict[str, pb.CheckpointMeta]
    # Where every agent but those that left would roll back if all failed now: the
    # newest consistent global checkpoint (WhatIf with every such agent failed).
    recovery_line: list[pb.RollbackTarget]


def read_group(conn: Connection, name: str) -> GroupView:
    first, agents = target.every_page(conn, "GetGroup", pb.GetGroupRequest(group=name), "agents")
    _, checkpoints = target.every_page(conn, "ListCheckpoints", pb.ListCheckpointsRequest(group=name), "checkpoints")
    latest = {cp.agent_id: cp for cp in checkpoints}  # by (agent, index): the last one wins
    latest_stable = {cp.agent_id: cp for cp in checkpoints if cp.stable}
    present = [a.agent_id for a in agents if a.state != pb.AGENT_DEREGISTERED]
    line = conn.call("AdminService", "WhatIf", pb.WhatIfRequest(group=name, failed=present)).targets if present else []
    return GroupView(first.group, agents, checkpoints, latest, latest_stable, list(line))


def run_show(args: argparse.Namespace) -> int:
    view, code = target.admin_calls(args, f"{PROG} show", lambda conn: read_group(conn, args.name))
    if code:
        return code
    if args.json:
        print_json({"group": plain(view.group), "agents": [plain(a) for a in view.agents],
                    "latest_checkpoints": [plain(cp) for cp in view.latest.values()],
                    "recovery_line": [plain(t) for t in view.recovery_line]})
        return 0
    g = view.group
    print(f"group {g.spec.group}: mode {mode_word(g.spec.mode)}, {enum_word(pb.GroupState, g.state)}, "
          f"stable epoch {g.stable_epoch} (current {g.current_epoch}), {g.recovery_id} recoveries, "
          f"created {utc(g.created_at)}")
    line = {t.agent_id: t.checkpoint_index for t in view.recovery_line}

    def index(cps: dict[str, pb.CheckpointMeta], agent_id: str) -> object:
        return cps[agent_id].index if agent_id in cps else "-"
    print_table(("AGENT", "STATE", "INCARNATION", "LATEST", "LATEST STABLE", "RECOVERY LINE"),
                [(a.agent_id, enum_word(pb.AgentState, a.state, "AGENT_"), a.incarnation, index(view.latest, a.agent_id),
                  index(view.latest_stable, a.agent_id), line.get(a.agent_id, "-")) for a in view.agents])
    return 0
