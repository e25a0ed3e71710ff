"""The durable record of an agent's recorded calls: runs, their calls, their effects.

A run is written only once it does something a later replay must know: its first
live call or external effect. It then *forks* from the coordinate where it stood in
the history it was replaying (or from nothing), and records from there every call
it makes, replayed ones included, and the position of every external effect it
starts. A checkpoint names the coordinate it was taken at, so the history after a
checkpoint is found from the checkpoint alone: the calls of its run from there on,
continued by the newest run forked from that run at or after that point (which
undid the rest), and so on. Coordinate (0, 0), run 0, is the cold start: every run
that began without a checkpoint forks from it.

The journal is the side-effect log's sqlite3 file (synchronous=FULL, one
transaction per record): a response is durable before the agent sees it.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from agent_client.replay import Coordinate, History, RecordedCall

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS call_runs (run INTEGER PRIMARY KEY AUTOINCREMENT, parent INTEGER, at INTEGER)",
    "CREATE TABLE IF NOT EXISTS recorded_calls (run INTEGER NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, "
    "digest TEXT NOT NULL, response TEXT NOT NULL, PRIMARY KEY (run, seq))",
    "CREATE TABLE IF NOT EXISTS effect_marks (run INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS call_runs_parent ON call_runs (parent, at)",
)
_BEFORE_STOP = " AND (? IS NULL OR seq < ?)"  # the part of a run before its newest fork, if any


class CallLog:
    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self._db.execute(statement)
        self._lock = threading.Lock()

    def fork(self, origin: Coordinate | None) -> int:
        """A new run continuing the history at `origin` (None: no history); its id."""
        parent, at = origin if origin is not None else (None, None)
        with self._lock:
            cursor = self._db.execute("INSERT INTO call_runs (parent, at) VALUES (?, ?)", (parent, at))
            return cursor.lastrowid or 0  # never 0 after an INSERT

    def add_call(self, run: int, seq: int, name: str, digest: str, response: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO recorded_calls (run, seq, name, digest, response) VALUES (?, ?, ?, ?, ?)",
                             (run, seq, name, digest, response))

    def add_effect(self, run: int, seq: int, key: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO effect_marks (run, seq, key) VALUES (?, ?, ?)", (run, seq, key))

    def holds(self, origin: Coordinate) -> bool:
        """Whether the run `origin` names was written here (the cold start always was)."""
        with self._lock:
            return origin[0] == 0 or self._db.execute("SELECT 1 FROM call_runs WHERE run = ?",
                                                      (origin[0],)).fetchone() is not None

    def history(self, origin: Coordinate | None) -> History:
        """What the agent last did from `origin` on (None: nothing is known)."""
        if origin is None:
            return History()
        calls: list[RecordedCall] = []
        effects: list[int] = []
        run, at = origin
        with self._lock:
            while True:
                fork = self._db.execute("SELECT run, at FROM call_runs WHERE parent = ? AND at >= ? "
                                        "ORDER BY run DESC LIMIT 1", (run, at)).fetchone()
                stop = fork[1] if fork is not None else None
                span = (run, at, stop, stop)
                rows = self._db.execute("SELECT seq, name, digest, response FROM recorded_calls WHERE run = ? "
                                        f"AND seq >= ?{_BEFORE_STOP} ORDER BY seq", span).fetchall()
                base, dense = len(calls), [row for i, row in enumerate(rows) if row[0] == at + i]
                calls += [RecordedCall(name, digest, response, (run, seq)) for seq, name, digest, response in dense]
                effects += [base + seq - at for (seq,) in self._db.execute(
                    f"SELECT seq FROM effect_marks WHERE run = ? AND seq >= ?{_BEFORE_STOP} ORDER BY seq", span)
                    if seq <= at + len(dense)]
                if fork is None or len(dense) < len(rows):  # positions are dense: a hole ends the history
                    return History(tuple(calls), tuple(effects), (run, at + len(dense)))
                run, at = int(fork[0]), 0

    def close(self) -> None:
        with self._lock:
            self._db.close()
