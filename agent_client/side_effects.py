"""External effects at most once per idempotency key, across crashes and rollbacks.

A rollback replays an agent's work from a checkpoint; an email sent or a payment made
during the lost interval must not happen twice. Each effect is keyed by a step id that
does not depend on the incarnation. Its start is recorded durably *before* it runs and
its JSON result after, so a replay gets the recorded result without running it again.
An effect that started but never finished (the agent crashed in between, or `fn`
raised) is *in doubt*: the log refuses to guess; the caller decides (retry only if the
effect is itself idempotent downstream).

Output commit: an effect can be held until the checkpoint covering it is stable, so
the outside world never sees output from a state that may still be rolled back. The
fact that a key is held is durable (the function is not: code cannot be journalled),
so after a restart `held_keys()` tells the agent which held effects to re-submit.

sqlite3 (stdlib) with synchronous=FULL is the journal: atomic, fsynced transactions
without writing our own log format. Results are JSON so replays never unpickle.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

_SCHEMA = "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT)"
STARTED, DONE, HELD = "started", "done", "held"


class InDoubtEffect(Exception):
    """The effect started before a crash (or raised) and its outcome is unknown."""

    def __init__(self, key: str, why: str = "started before a crash or failed and did not record a result") -> None:
        super().__init__(f"side effect {key!r} {why}; pass retry_in_doubt=True only if it is safe to run again")
        self.key = key


class SideEffectLog:
    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self._lock = threading.RLock()
        self._running: set[str] = set()
        self._held: dict[str, tuple[Callable[[], Any], Callable[[], bool]]] = {}

    # ---- at most once ----------------------------------------------------------------
    def _claim(self, key: str, retry_in_doubt: bool) -> tuple[bool, Any]:
        """(True, None) if we now own the run of `key`; (False, result) if it is done."""
        with self._lock:
            if key in self._running:
                raise InDoubtEffect(key, "is running right now in this process")
            self._db.execute("BEGIN IMMEDIATE")  # excludes other processes between read and claim
            try:
                row = self._db.execute("SELECT state, result FROM effects WHERE key = ?", (key,)).fetchone()
                if row is not None and row[0] == DONE:
                    self._db.execute("COMMIT")
                    return False, json.loads(row[1])
                if row is not None and row[0] == STARTED and not retry_in_doubt:
                    raise InDoubtEffect(key)
                self._db.execute("INSERT OR REPLACE INTO effects (key, state, result) VALUES (?, ?, NULL)",
                                 (key, STARTED))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._running.add(key)
            return True, None

    def run(self, key: str, fn: Callable[[], Any], *, retry_in_doubt: bool = False) -> Any:
        """fn() at most once for `key`; later calls (even after a restart) return its result.

        The first call returns the result as a replay would see it (decoded JSON, so a
        tuple comes back as a list both times)."""
        owned, result = self._claim(key, retry_in_doubt)
        if not owned:
            return result
        try:
            value = fn()  # if this raises, the key stays "started": in doubt
        finally:
            with self._lock:
                self._running.discard(key)
        try:
            encoded = json.dumps(value, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"side effect {key!r} ran but its result is not JSON ({exc}); it is now in doubt") from exc
        with self._lock:
            self._db.execute("UPDATE effects SET state = ?, result = ? WHERE key = ?", (DONE, encoded, key))
        return json.loads(encoded)

    def record_call(self, key: str, fn: Callable[[], Any]) -> Any:
        """A tool or LLM call: after a rollback the replay gets the recorded answer, keeping
        the replayed computation identical to the first run. Re-running an interrupted call
        is harmless (no external effect), so in-doubt calls are retried."""
        return self.run(key, fn, retry_in_doubt=True)

    def result(self, key: str) -> tuple[str, Any] | None:
        """(state, result or None) as journalled, or None if the key is unknown."""
        with self._lock:
            row = self._db.execute("SELECT state, result FROM effects WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return row[0], None if row[1] is None else json.loads(row[1])

    # ---- output commit ---------------------------------------------------------------
    def hold_until_stable(self, key: str, fn: Callable[[], Any], stable_check: Callable[[], bool]) -> Any:
        """Run now if the covering checkpoint is already stable (returns the result), else
        queue it until release() finds `stable_check()` true (returns None). A key that
        already ran returns its recorded result: replays never re-send output."""
        with self._lock:
            row = self._db.execute("SELECT state FROM effects WHERE key = ?", (key,)).fetchone()
            if row is None:
                self._db.execute("INSERT INTO effects (key, state, result) VALUES (?, ?, NULL)", (key, HELD))
            already_claimed = row is not None and row[0] != HELD  # done (replay) or in doubt: run() decides
            if already_claimed or stable_check():
                self._held.pop(key, None)
                return self.run(key, fn)
            self._held[key] = (fn, stable_check)
            return None

    def release(self) -> dict[str, Any]:
        """Run every held effect whose checkpoint is now stable; returns {key: result}."""
        with self._lock:
            ready = [key for key, (_, check) in self._held.items() if check()]
            jobs = [(key, self._held.pop(key)[0]) for key in ready]
        return {key: self.run(key, fn) for key, fn in jobs}

    def discard_held(self, keys: list[str] | None = None) -> list[str]:
        """A rollback undid the work that produced these held effects (default: all):
        they must never happen. Returns the discarded keys."""
        with self._lock:
            doomed = list(self._held) if keys is None else [k for k in keys if k in self._held]
            for key in doomed:
                del self._held[key]
                self._db.execute("DELETE FROM effects WHERE key = ? AND state = ?", (key, HELD))
            return doomed

    def held_keys(self) -> list[str]:
        """Keys journalled as held and not yet run, including ones held before a restart
        (whose functions are gone and must be re-submitted with hold_until_stable)."""
        with self._lock:
            rows = self._db.execute("SELECT key FROM effects WHERE state = ? ORDER BY key", (HELD,)).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
