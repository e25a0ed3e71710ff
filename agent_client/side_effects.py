"""External effects at most once per idempotency key, across crashes and rollbacks.

A rollback replays an agent's work from a checkpoint; an email sent or a payment
made during the lost interval must not happen twice. Each effect is keyed by a step
id that does not depend on the incarnation: its start is recorded durably before it
runs and its JSON result after, so a replay gets the recorded result. An effect that
started but never finished (the agent crashed in between) is *in doubt*: the log
refuses to guess, the caller decides (retry only if the effect is itself idempotent).

Output commit: an effect can be held until the checkpoint covering it is stable, so
the outside world never sees output from a state that may still be rolled back.
sqlite3 (stdlib) with synchronous=FULL gives the durable, atomic journal.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Callable


class InDoubtEffect(Exception):
    """The effect started before a crash and its outcome is unknown."""

    def __init__(self, key: str) -> None:
        super().__init__(f"side effect {key!r} started before a crash and did not record a result; "
                         "pass retry_in_doubt=True only if it is safe to run again")
        self.key = key


class SideEffectLog:
    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT)")
        self._held: list[tuple[str, Callable[[], Any], int]] = []

    def run(self, key: str, fn: Callable[[], Any], *, retry_in_doubt: bool = False) -> Any:
        row = self._db.execute("SELECT state, result FROM effects WHERE key = ?", (key,)).fetchone()
        if row is not None:
            state, result = row
            if state == "done":
                return json.loads(result)
            if not retry_in_doubt:
                raise InDoubtEffect(key)
        self._db.execute("INSERT OR REPLACE INTO effects (key, state, result) VALUES (?, 'started', NULL)", (key,))
        result = fn()
        encoded = json.dumps(result, sort_keys=True)  # only JSON results: replays must reproduce them exactly
        self._db.execute("UPDATE effects SET state = 'done', result = ? WHERE key = ?", (encoded, key))
        return result

    def record_call(self, key: str, fn: Callable[[], Any]) -> Any:
        """A tool or LLM call: after a rollback the replay gets the recorded answer,
        keeping the replayed computation identical to the first run."""
        return self.run(key, fn, retry_in_doubt=True)

    def hold_until_stable(self, key: str, fn: Callable[[], Any], checkpoint_index: int) -> None:
        """Queue an effect until the checkpoint with this index is stable."""
        self._held.append((key, fn, checkpoint_index))

    def release(self, is_stable: Callable[[int], bool]) -> list[str]:
        """Run the held effects whose covering checkpoint is now stable; returns their keys."""
        ready = [h for h in self._held if is_stable(h[2])]
        self._held = [h for h in self._held if not is_stable(h[2])]
        for key, fn, _ in ready:
            self.run(key, fn)
        return [key for key, _, _ in ready]

    def discard_held_after(self, checkpoint_index: int) -> None:
        """A rollback to this checkpoint: effects of the undone work never happen."""
        self._held = [h for h in self._held if h[2] <= checkpoint_index]

    def close(self) -> None:
        self._db.close()
