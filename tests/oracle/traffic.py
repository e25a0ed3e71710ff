"""The agents' side of a random run through the state machine: checkpoints, sends and
receives, kept in an EventLog for the brute-force definitions and applied as the
commands an agent would send."""
from __future__ import annotations

from typing import Callable

from coordinator.core import commands as c
from coordinator.core.history import EventLog
from coordinator.core.model import Checkpoint, CheckpointKind


class Traffic:
    """Applies each event through `apply` (which may hand it to several machines)."""

    def __init__(self, agents: list[str], apply: Callable[[c.Command], object]) -> None:
        self.agents = agents
        self.apply = apply
        self.log = EventLog(agents)
        self.in_flight: list[tuple[str, str]] = []

    def step(self, step: int, op: str, who: int, to: int, jump: int, tag: str = "m") -> None:
        """One event: a checkpoint whose index jumps by `jump`, a send to agent `to`, or
        the receive of the `to`th message in flight; any other `op` is left to the caller.
        A send's message id is `tag` and the step: runs played one after the other on the
        same log take different tags."""
        n = len(self.agents)
        agent = self.agents[who % n]
        if op == "checkpoint":
            index = self.log.checkpoint(agent, self.log.interval(agent) - 1 + jump)
            self.apply(c.CommitCheckpoint(c.Token(1, 0), checkpoint(agent, index)))
        elif op == "send" and self.agents[to % n] != agent:
            self.log.send(agent, f"{tag}{step}")
            self.in_flight.append((f"{tag}{step}", self.agents[to % n]))
        elif op == "receive" and self.in_flight:
            mid, receiver = self.in_flight.pop(to % len(self.in_flight))
            self.log.receive(receiver, mid)
            self.apply(c.ReportDependencies("g", receiver, c.Token(1, 0), (self.log.history().messages[-1],)))


def checkpoint(agent: str, index: int) -> Checkpoint:
    """A full checkpoint (no parent) of group "g", its blob named by agent and index."""
    return Checkpoint("g", agent, index, 0, CheckpointKind.BASIC, f"file:///blobs/{agent}/{index}", "ab" * 32, 1)
