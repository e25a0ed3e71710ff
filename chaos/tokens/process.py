"""Driver side of a demo agent process: spawn, one command -> one JSON reply, kill.

Replies are read by a thread into a queue so every wait has a deadline: a wedged or
killed agent shows up as a clear error instead of a hung demo. Each agent also keeps
a journal of events (the agent's --events; one file for all its incarnations) that
`events()` reads incrementally.
"""
from __future__ import annotations

import copy
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from agent_client.connection import TOKEN_FILE_ENV
from coordinator.harness.local_cluster import harness_access

REPLY_TIMEOUT_S = 30.0


class AgentDied(RuntimeError):
    pass


class AgentProcess:
    def __init__(self, agent_id: str, *, group: str, endpoints: Sequence[str], blob_dir: Path | str, log_dir: Path,
                 members: Sequence[str] = (), tokens: int = 100, env: dict[str, str] | None = None,
                 deadline: float = 20.0, state_dir: Path | None = None) -> None:
        """`blob_dir` is any blob store location (a directory or an s3:// URL); `state_dir`
        holds the agent's delivery log (default: inside a directory blob store)."""
        self.agent_id = agent_id
        self._log_path = Path(log_dir) / f"{group}-{agent_id}.log"
        self.events_path = Path(log_dir) / f"{group}-{agent_id}.events.jsonl"
        self._endpoints = list(endpoints)
        self._argv = [sys.executable, "-m", "chaos.tokens.agent", "--group", group, "--agent", agent_id,
                      "--endpoints", ",".join(endpoints), "--blob-dir", str(blob_dir),
                      "--members", ",".join(members), "--tokens", str(tokens), "--events", str(self.events_path),
                      "--deadline", str(deadline)] + ([] if state_dir is None else ["--state-dir", str(state_dir)])
        self._env = env or {}
        self.proc: subprocess.Popen | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events_read = 0  # bytes of the journal already returned by events()

    def successor(self) -> "AgentProcess":
        """Another process for the same agent (same journal, read on from here), while this
        one may keep running: a zombie and its replacement."""
        other = copy.copy(self)
        other.proc, other._replies = None, queue.Queue()
        return other

    def _token_env(self) -> dict[str, str]:
        """Points the agent at the admin token of the harness cluster it talks to, if any."""
        access = harness_access(self._endpoints)
        return {TOKEN_FILE_ENV: str(access[1])} if access else {}

    def spawn(self, env: dict[str, str] | None = None) -> "AgentProcess":
        self._replies = queue.Queue()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self._log_path, "ab")
        self.proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     env={**os.environ, **self._token_env(), **self._env, **(env or {})},
                                     start_new_session=True)
        log.close()
        threading.Thread(target=self._read, args=(self.proc, self._replies), daemon=True).start()
        return self

    @staticmethod
    def _read(proc: subprocess.Popen, replies: "queue.Queue[dict[str, Any] | None]") -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            replies.put(json.loads(line))
        replies.put(None)  # EOF: the process is gone

    def reply(self, timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        try:
            doc = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AgentDied(f"{self.agent_id} did not answer within {timeout:.0f}s (see {self._log_path})") from None
        if doc is None:
            raise AgentDied(f"{self.agent_id} exited (code {self.proc.wait(5) if self.proc else '?'}; "
                            f"see {self._log_path})")
        if "error" in doc:
            raise RuntimeError(f"{self.agent_id}: {doc['error']} (see {self._log_path})")
        return doc

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self.proc is None or self.proc.stdin is None:
            raise AgentDied(f"{self.agent_id} is not running")
        try:
            self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise AgentDied(f"{self.agent_id} exited (see {self._log_path})") from None
        return self.reply()

    def dump_stacks(self) -> None:
        """Ask the agent to write all its thread stacks to its log (diagnosing a hang)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs in the agent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask it to quit (it flushes and closes its client); kill at the deadline."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"op": "quit"}\n')
            self.proc.stdin.close()
            self.proc.wait(timeout)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self.kill()

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self) -> list[dict[str, Any]]:
        """Journal records written since the last call (complete lines only: a record
        being written, or torn by a SIGKILL, is left for later or for good)."""
        try:
            with open(self.events_path, "rb") as f:
                f.seek(self._events_read)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._events_read += end
        return [doc for line in data[:end].splitlines() if (doc := _record(line)) is not None]


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(line)
    except ValueError:  # torn by a SIGKILL mid-write: the next incarnation ended it with a newline
        return None
    return doc if isinstance(doc, dict) else None
