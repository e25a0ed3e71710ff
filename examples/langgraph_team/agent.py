"""One agent process of the team: `python agent.py ROLE --mode raftpoint|stock --dir RUN [...]`.

raftpoint: the agent's LangGraph thread is stored by RaftpointSaver, its messages
travel as raftpoint envelopes, and its raftpoint checkpoint names the LangGraph
checkpoint it stands for (`head`): a rollback to raftpoint checkpoint k makes the
next step continue the thread from the LangGraph checkpoint recorded in k. The
search tool runs through side_effect(), keyed by the task.

stock: LangGraph's SqliteSaver per agent and plain messages: each agent resumes its
own thread from its own latest checkpoint, and a message's file is removed once it
has been handled (at least once).

--crash-after-part K (researcher): after sending its finding for part K and seeing
the writer take it, the process kills itself with SIGKILL before it checkpoints.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graphs import PARTS, build, search_result  # noqa: E402
from network import Network  # noqa: E402

POLL_S = 0.02
TAKEN_DEADLINE_S = 60.0


def search_tool(run: Path) -> Callable[[int, str], str]:
    """The external side effect: each call is recorded where no rollback can undo it."""
    def search(part: int, task: str) -> str:
        with open(run / "tool_calls.log", "a") as ledger:
            ledger.write(f"{part}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return search_result(part, task)
    return search


def crash_after(path: Path) -> None:
    """Wait until the receiver has taken `path` (handled and removed it), then die."""
    end = time.monotonic() + TAKEN_DEADLINE_S
    while path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"{path} was never taken")
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


def write_answer(run: Path, result: dict[str, Any]) -> None:
    tmp = run / "answer.json.tmp"
    tmp.write_text(json.dumps({"answer": result["answer"], "notes": result["notes"]}))
    os.replace(tmp, run / "answer.json")


def run_raftpoint(role: str, args: argparse.Namespace, net: Network) -> None:
    from agent_client import connect
    from agent_client.langgraph import RaftpointSaver

    endpoints = args.endpoints.split(",")
    with RaftpointSaver(endpoints, args.dir / "blobs", group=f"{args.team}-threads") as saver, \
            connect(endpoints, identity=role, data_dir=args.dir / "blobs") as rp:
        graph = build(role, saver)
        group = rp.group(args.team, mode="bcs", create=True)
        with group.agent(role, state={"head": None, "planned": 0}) as me:
            tool = search_tool(args.dir)

            def keyed_tool(part: int, task: str) -> str:
                return me.client.side_effect(f"search-{part}", lambda: tool(part, task))

            def step(incoming: dict[str, Any]) -> None:
                """One graph step from the LangGraph checkpoint this agent's state names."""
                configurable = {"thread_id": role, "tool": keyed_tool}
                if me.state["head"]:
                    configurable["checkpoint_id"] = me.state["head"]
                result = graph.invoke({"incoming": incoming}, {"configurable": configurable})
                head = graph.get_state({"configurable": {"thread_id": role}}).config["configurable"]["checkpoint_id"]
                sent = [net.send(role, out["to"], me.send(json.dumps(out["body"]).encode(), to=out["to"]))
                        for out in result.get("outbox", [])]
                if args.crash_after_part is not None and incoming.get("part") == args.crash_after_part and sent:
                    crash_after(sent[-1])
                me.state = {**me.state, "head": head, "planned": me.state["planned"] + (role == "planner")}
                me.checkpoint()
                if result.get("answer"):
                    me.client.side_effect("answer", lambda: write_answer(args.dir, result))

            while role == "planner" and me.state["planned"] < PARTS:
                with me.atomic():
                    step({"part": me.state["planned"]})
            while not (args.dir / "stop").exists():
                with me.atomic():
                    for _, payload in me.take_redelivered():
                        step(json.loads(payload))
                for path in net.pending(role):
                    with me.atomic():
                        payload = me.receive(path.read_bytes())
                        if payload is not None:
                            step(json.loads(payload))
                    path.unlink()
                time.sleep(POLL_S)
            report = {"role": role, "rollbacks": [r.index for r in me.client.rollbacks],
                      "redelivered": len(me.client.redelivered), "orphans": me.client.orphans,
                      "duplicates": me.client.duplicates}
    (args.dir / f"{role}.json").write_text(json.dumps(report))


def run_stock(role: str, args: argparse.Namespace, net: Network) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(args.dir / f"{role}.sqlite", check_same_thread=False))
    graph = build(role, saver)
    tool = search_tool(args.dir)
    config = {"configurable": {"thread_id": role, "tool": tool}}

    def step(incoming: dict[str, Any]) -> list[Path]:
        result = graph.invoke({"incoming": incoming}, config)
        if result.get("answer"):
            write_answer(args.dir, result)
        return [net.send(role, out["to"], json.dumps(out["body"]).encode()) for out in result.get("outbox", [])]

    if role == "planner":
        planned = len(graph.get_state(config).values.get("notes", []))
        for part in range(planned, PARTS):
            step({"part": part})
    while not (args.dir / "stop").exists():
        for path in net.pending(role):
            body = json.loads(path.read_bytes())
            sent = step(body)
            if args.crash_after_part is not None and body.get("part") == args.crash_after_part and sent:
                crash_after(sent[-1])
            path.unlink()
        time.sleep(POLL_S)
    (args.dir / f"{role}.json").write_text(json.dumps({"role": role}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("planner", "researcher", "writer"))
    parser.add_argument("--mode", choices=("raftpoint", "stock"), required=True)
    parser.add_argument("--dir", type=Path, required=True, help="the run's directory (network, ledgers, blobs)")
    parser.add_argument("--endpoints", default="", help="coordinator addresses, comma-separated (raftpoint mode)")
    parser.add_argument("--team", default="team", help="the raftpoint group (its threads: <team>-threads)")
    parser.add_argument("--crash-after-part", type=int, default=None)
    args = parser.parse_args()
    net = Network(args.dir / "net")
    (run_raftpoint if args.mode == "raftpoint" else run_stock)(args.role, args, net)


if __name__ == "__main__":
    main()
