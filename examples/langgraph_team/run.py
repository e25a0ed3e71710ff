"""Three LangGraph agents in their own processes, one killed mid-run: raftpoint against a stock saver.

    python examples/langgraph_team/run.py [--cluster]

Runs the team three times: with raftpoint and no crash (the reference answer), with
raftpoint and the researcher killed with SIGKILL between sending a finding and
checkpointing, and the same crash with LangGraph's SqliteSaver per agent. The
coordinator is the in-process one (agent_client.testing), or with --cluster a real
3-node cluster on loopback. Prints one row per run and exits non-zero if the
raftpoint run with the crash differs from the reference in any measured way.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from graphs import PARTS, expected_answer  # noqa: E402
from network import Network  # noqa: E402

ROLES = ("planner", "researcher", "writer")
CRASH_PART = 1
RUN_DEADLINE_S = 180.0
QUIET_S = 1.0  # the network must stay empty this long before a run counts as finished


@dataclass
class Outcome:
    name: str
    answer: str | None
    tool_calls: Counter = field(default_factory=Counter)
    writer_notes: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)  # by a coordinator's rollback order
    restarted: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def duplicated_tool_calls(self) -> int:
        return sum(n - 1 for n in self.tool_calls.values() if n > 1)

    @property
    def messages_processed_twice(self) -> int:
        return sum(n - 1 for n in Counter(self.writer_notes).values() if n > 1)

    @property
    def messages_lost(self) -> int:
        return len({f"noted {p}" for p in range(PARTS)} - set(self.writer_notes))


def _agent(role: str, mode: str, run: Path, endpoints: str, crash: bool) -> subprocess.Popen:
    cmd = [sys.executable, str(HERE / "agent.py"), role, "--mode", mode, "--dir", str(run), "--endpoints", endpoints,
           "--team", run.name]
    if crash:
        cmd += ["--crash-after-part", str(CRASH_PART)]
    log = open(run / f"{role}.log", "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def _finished(run: Path, net: Network) -> bool:
    return (run / "answer.json").exists() and not any(net.pending(r) for r in ROLES)


def run_team(name: str, mode: str, run: Path, endpoints: str, crash: bool) -> Outcome:
    run.mkdir(parents=True)
    net = Network(run / "net")
    started = time.monotonic()
    procs = {role: _agent(role, mode, run, endpoints, crash and role == "researcher") for role in ROLES}
    restarted = []
    end = started + RUN_DEADLINE_S
    quiet_since = None
    try:
        while True:
            if time.monotonic() > end:
                logs = "\n".join(f"--- {r}\n" + (run / f"{r}.log").read_text()[-2000:] for r in ROLES)
                raise TimeoutError(f"{name}: no answer within {RUN_DEADLINE_S:.0f}s\n{logs}")
            for role, proc in procs.items():
                if proc.poll() is not None:
                    if not (crash and role == "researcher" and proc.returncode < 0):
                        log = (run / f"{role}.log").read_text()[-3000:]
                        raise RuntimeError(f"{name}: {role} exited with {proc.returncode}:\n{log}")
                    crash = False  # killed as planned: restart it once, without the crash
                    procs[role] = _agent(role, mode, run, endpoints, False)
                    restarted.append(role)
            if _finished(run, net):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= QUIET_S:
                    break
            else:
                quiet_since = None
            time.sleep(0.05)
        (run / "stop").touch()
        for proc in procs.values():
            proc.wait(timeout=30)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    answer = json.loads((run / "answer.json").read_text())
    ledger = (run / "tool_calls.log").read_text().split()
    reports = [json.loads((run / f"{r}.json").read_text()) for r in ROLES]
    return Outcome(name, answer["answer"], Counter(int(p) for p in ledger), list(answer["notes"]),
                   [r["role"] for r in reports if r.get("rollbacks")], restarted, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", action="store_true", help="a real 3-node cluster instead of the in-process one")
    args = parser.parse_args(argv)
    from agent_client import testing
    from agent_client.tls import environment

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lg-team-")))
        if args.cluster:
            from coordinator.harness.local_cluster import LocalCluster
            cluster = stack.enter_context(LocalCluster(tmp / "cluster", 3).start_all())
            cluster.leader()
            endpoints = ",".join(node.grpc for node in cluster.nodes)
            tls = cluster.client_tls()
        else:
            coordinator = stack.enter_context(testing.coordinator())
            endpoints, tls = coordinator.address, coordinator.client_tls()
        # The agent processes read the CA and their certificate from RAFTPOINT_CA_FILE etc.
        stack.enter_context(environment(tls))
        reference = run_team("raftpoint, no crash", "raftpoint", tmp / "reference", endpoints, False)
        ours = run_team("raftpoint, crash", "raftpoint", tmp / "ours", endpoints, True)
        stock = run_team("SqliteSaver, crash", "stock", tmp / "stock", "", True)
    expected = expected_answer()
    print(f"{PARTS} research tasks; the researcher is killed after sending finding {CRASH_PART}, before it checkpoints\n")
    print("| run | restarted | rolled back by the coordinator | tool calls | duplicated tool calls "
          "| findings the writer processed twice | findings lost | final answer as without the crash | seconds |")
    print("|---|---|---|---:|---:|---:|---:|---|---:|")
    for o in (reference, ours, stock):
        print(f"| {o.name} | {', '.join(o.restarted) or '-'} | {', '.join(o.rolled_back) or '-'} "
              f"| {sum(o.tool_calls.values())} | {o.duplicated_tool_calls} | {o.messages_processed_twice} "
              f"| {o.messages_lost} | {'yes' if o.answer == expected else 'NO'} | {o.seconds:.1f} |")
    consistent = all(o.answer == expected and not o.duplicated_tool_calls and not o.messages_processed_twice
                     and not o.messages_lost for o in (reference, ours))
    rolled_back_right = not reference.rolled_back and ours.rolled_back == ["writer"] and ours.restarted == ["researcher"]
    stock_broken = stock.answer != expected or stock.duplicated_tool_calls or stock.messages_processed_twice
    print("\nraftpoint: " + ("the crash changed nothing" if consistent else "INCONSISTENT")
          + "; rolled back exactly the researcher (restarted) and the writer (it took an orphan finding): "
          + ("yes" if rolled_back_right else "NO")
          + "; the stock saver ended inconsistent: " + ("yes" if stock_broken else "no"))
    return 0 if consistent and rolled_back_right and stock_broken else 1


if __name__ == "__main__":
    sys.exit(main())
