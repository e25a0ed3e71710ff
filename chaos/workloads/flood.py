"""The agent flood of a chaos run: chaos.workloads.agent_flood as a subprocess, then its evidence.

The flood process registers and heartbeats its agents for the run's load time (no
history of its own: thousands of heartbeats a second would drown it). When it has
exited, its agents' final states are read through GetGroup at once (before any lease
its last beats renewed could run out), and what the no-healthy-agent-declared-failed
invariant needs goes into the history as notes:

- one FLOOD_GROUP note per group: the time the group's read completed (`read_at`,
  None when it failed) and per agent registered by the flood: the send time of its
  answered Register (`reg`), the send times of its answered heartbeats (`beats`) and
  of those refused for authorization (`denied`), its first not-live refusal
  (`refused`: [time, reason] or None) and its final state;
- one FLOOD_RUN note: the flood's outcome counts and what became of the process.

Every time is converted from the flood's monotonic clock to the history's.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent_client.connection import Connection
from chaos.history import History
from chaos.workloads.agent_flood import GROUP_SIZE, group_of
from coordinator.api.v1 import coordinator_pb2 as pb

log = logging.getLogger(__name__)

PROCESS = "flood"
FLOOD_GROUP, FLOOD_RUN = "flood-group", "flood-run"
# On top of the load time: the flood creates its groups first (its deadline is 60 s),
# then its last calls may take an RPC timeout.
GRACE_S = 75.0
READ_DEADLINE_S = 30.0
ROOT = Path(__file__).resolve().parents[2]


def committers_for(agents: int) -> int:
    """As many committers as tests/cluster/test_overload.py uses for 1000 agents, scaled."""
    return max(1, agents // 8)


class FloodWorkload:
    def __init__(self, history: History, endpoints: list[str], out: Path, *, agents: int, seconds: float,
                 ramp_s: float, token: str | None, token_file: Path | None, env: dict[str, str],
                 lease_ttl_s: float | None = None) -> None:
        """`lease_ttl_s`: the lease of the flood's agents (None: the flood's default)."""
        self.history, self.endpoints, self.out = history, endpoints, Path(out)
        self.agents, self.seconds, self.ramp_s, self.lease_ttl_s = agents, seconds, ramp_s, lease_ttl_s
        self.token, self.token_file, self.env = token, token_file, env
        self.problems: list[str] = []  # harness problems, for the run's notes
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        # history time = monotonic time - offset
        self._offset = time.monotonic() - history.now()

    @property
    def groups(self) -> int:
        return (self.agents + GROUP_SIZE - 1) // GROUP_SIZE

    @property
    def timeout_s(self) -> float:
        return self.seconds + GRACE_S

    def start(self) -> "FloodWorkload":
        self.out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "chaos.workloads.agent_flood", "--endpoints", ",".join(self.endpoints),
                "--agents", str(self.agents), "--committers", str(committers_for(self.agents)),
                "--seconds", str(self.seconds), "--ramp", str(self.ramp_s), "--out", str(self.result_path)]
        if self.token_file is not None:
            argv += ["--token-file", str(self.token_file)]
        if self.lease_ttl_s is not None:
            argv += ["--lease-ttl", str(self.lease_ttl_s)]
        self.result_path.unlink(missing_ok=True)
        with open(self.out / "flood.log", "wb") as logfile:
            self._process = subprocess.Popen(argv, env={**os.environ, **self.env}, cwd=ROOT, stdout=logfile,
                                             stderr=subprocess.STDOUT)
        self._thread = threading.Thread(target=self._guarded, name="chaos-flood", daemon=True)
        self._thread.start()
        return self

    @property
    def result_path(self) -> Path:
        return self.out / "flood.json"

    def _guarded(self) -> None:
        try:
            self._follow()
        except Exception as exc:  # a harness problem: said in the run's notes, not a finding
            log.exception("the flood's harness failed")
            self.problems.append(f"the flood's harness failed: {type(exc).__name__}: {exc}")

    def _follow(self) -> None:
        """Wait for the flood (bounded), then read its agents' final states at once."""
        assert self._process is not None
        started = time.monotonic()
        killed = False
        try:
            code = self._process.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait()
            killed = True
            self.problems.append(f"the flood ran past its {self.timeout_s:.0f}s bound and was killed")
        result = json.loads(self.result_path.read_text()) if self.result_path.exists() else None
        if result is None and not killed:
            tail = (self.out / "flood.log").read_text(errors="replace")[-500:]
            self.problems.append(f"the flood exited {code} without a result: {tail}")
        run: dict[str, Any] = {"agents": self.agents, "exit": code, "killed": killed,
                               "seconds": round(time.monotonic() - started, 3)}
        if result is not None:
            run.update(outcomes=result["outcomes"], lease_ttl_s=result["lease_ttl_s"],
                       heartbeat_interval_s=result["heartbeat_interval_s"], ramp_s=result["ramp_s"],
                       registered=len(result["registered"]), errors=result["errors"][:5])
            self._record_agents(result)
        self.history.note(PROCESS, FLOOD_RUN, run)

    def _t(self, monotonic: float | None) -> float | None:
        return None if monotonic is None else round(monotonic - self._offset, 3)

    def _record_agents(self, result: dict[str, Any]) -> None:
        by_group: dict[str, list[str]] = {}
        for agent in result["registered"]:
            by_group.setdefault(group_of(int(agent.split("-")[1])), []).append(agent)
        ttl = result["lease_ttl_s"]
        with Connection(self.endpoints, deadline=READ_DEADLINE_S, token=self.token) as conn:
            for group in sorted(by_group, key=lambda g: int(g.split("-")[1])):
                states, read_at = self._read(conn, group)
                agents = {}
                for agent in sorted(by_group[group], key=lambda a: int(a.split("-")[1])):
                    refused = result["refused"].get(agent)
                    agents[agent] = {
                        "reg": self._t(result["registered"][agent]),
                        "beats": [self._t(t) for t in result["beats"].get(agent, [])],
                        "denied": [self._t(t) for t in result["denied"].get(agent, [])],
                        "refused": [self._t(refused[0]), refused[1]] if refused else None,
                        "state": states.get(agent, "MISSING") if states is not None else None}
                self.history.note(PROCESS, FLOOD_GROUP, {"group": group, "lease_ttl_s": ttl, "read_at": read_at,
                                                         "agents": agents})

    def _read(self, conn: Connection, group: str) -> tuple[dict[str, str] | None, float | None]:
        """The group's agents' states by name, and the history time the read completed."""
        states: dict[str, str] = {}
        token = ""
        try:
            while True:
                reply = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=group, page_token=token))
                states.update((a.agent_id, pb.AgentState.Name(a.state).removeprefix("AGENT_")) for a in reply.agents)
                token = reply.next_page_token
                if not token:
                    break
        except Exception as exc:
            self.problems.append(f"the final read of flood group {group} failed: {type(exc).__name__}: {exc}")
            return None, None
        return states, round(self.history.now(), 3)

    def wait(self) -> list[str]:
        """Until the flood has exited and its evidence is recorded; the harness problems."""
        if self._thread is not None:
            self._thread.join(self.timeout_s + 2 * READ_DEADLINE_S * self.groups + 30)
            if self._thread.is_alive():
                self.problems.append("the flood's final read did not finish")
        return self.problems

    def close(self) -> None:
        """Stop the flood without judging (an aborted run)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
