"""Checkpoint histories: per agent, checkpoint indexes and message dependencies.

Interval convention (used everywhere, agents included): an event's interval is
(index of the agent's latest checkpoint before the event) + 1, and checkpoint c of
an agent contains exactly its events with interval <= c. Indexes rise strictly
but may jump (BCS forced checkpoints, garbage collection), and the convention
still holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence


class HistoryError(ValueError):
    """A malformed history; the message names the offending agent, index or message."""


@dataclass(frozen=True)
class Dependency:
    """A message sent by `sender` in `send_interval`, received by `receiver` in `receive_interval`."""

    sender: str
    send_interval: int
    receiver: str
    receive_interval: int
    message_id: str
    send_generation: int = 0  # the sender's generation at the send (0: unknown, the oldest)


@dataclass(frozen=True)
class History:
    checkpoints: Mapping[str, tuple[int, ...]]  # agent -> sorted indexes, 0 first
    messages: tuple[Dependency, ...]

    @classmethod
    def from_dependencies(cls, checkpoints: Mapping[str, Sequence[int]], deps: Iterable[Dependency]) -> "History":
        """Build and validate; the initial checkpoint 0 is added when missing."""
        cps: dict[str, tuple[int, ...]] = {}
        for agent, indexes in checkpoints.items():
            full = tuple(indexes) if indexes and indexes[0] == 0 else (0, *indexes)
            for a, b in zip(full, full[1:]):
                if b <= a:
                    raise HistoryError(f"agent {agent!r}: checkpoint indexes must rise strictly, got {a} then {b}")
            cps[agent] = full
        seen: set[str] = set()
        messages = tuple(deps)
        for m in messages:
            if m.message_id in seen:
                raise HistoryError(f"duplicate message id {m.message_id!r}")
            seen.add(m.message_id)
            for agent, interval, role in ((m.sender, m.send_interval, "sender"), (m.receiver, m.receive_interval, "receiver")):
                if agent not in cps:
                    raise HistoryError(f"message {m.message_id!r}: unknown {role} {agent!r}")
                if interval < 1:
                    raise HistoryError(f"message {m.message_id!r}: {role} interval must be >= 1, got {interval}")
        return cls(cps, messages)


class EventLog:
    """Builds a History from events in the order an agent performs them (tests, simulator)."""

    def __init__(self, agents: Iterable[str]) -> None:
        self._cps: dict[str, list[int]] = {a: [0] for a in agents}
        self._sent: dict[str, tuple[str, int]] = {}
        self._deps: list[Dependency] = []

    def interval(self, agent: str) -> int:
        return self._cps[agent][-1] + 1

    def checkpoint(self, agent: str, index: int | None = None) -> int:
        last = self._cps[agent][-1]
        index = last + 1 if index is None else index
        if index <= last:
            raise HistoryError(f"agent {agent!r}: checkpoint {index} is not above {last}")
        self._cps[agent].append(index)
        return index

    def send(self, agent: str, message_id: str) -> None:
        if message_id in self._sent:
            raise HistoryError(f"duplicate message id {message_id!r}")
        self._sent[message_id] = (agent, self.interval(agent))

    def receive(self, agent: str, message_id: str) -> None:
        if message_id not in self._sent:
            raise HistoryError(f"receive of message {message_id!r} that was never sent")
        sender, send_interval = self._sent[message_id]
        self._deps.append(Dependency(sender, send_interval, agent, self.interval(agent), message_id))

    def history(self) -> History:
        return History.from_dependencies(self._cps, self._deps)
