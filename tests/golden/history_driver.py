"""Golden driver for coordinator.core.recovery_line: a history built event by event,
then questions about it (commands in datadriven.py's docstring).

Domino depth, as printed here: the most checkpoints any one agent passes on its way
back to the recovery line (0 when every agent restarts from its newest checkpoint
or keeps running); a history with the domino effect shows it growing with the story.
"""
from __future__ import annotations

from coordinator.core import recovery_line as rl
from coordinator.core.history import EventLog, History, HistoryError
from tests.golden.datadriven import Command, Dispatching

CURRENT = "current"


def show_cut(cut: rl.Cut) -> str:
    return " ".join(f"{a}={CURRENT if c is None else c}" for a, c in sorted(cut.items()))


def show_message(m: rl.Dependency) -> str:
    return f"{m.message_id} ({m.sender}.{m.send_interval}>{m.receiver}.{m.receive_interval})"


class HistoryDriver(Dispatching):
    """Refusals of the history model (HistoryError, ValueError) are output, not script errors."""

    def __init__(self) -> None:
        self.log: EventLog | None = None
        self.agents: tuple[str, ...] = ()

    def run(self, command: Command) -> str:
        try:
            return super().run(command)
        except (HistoryError, ValueError) as exc:
            command.check_all_read()
            return f"error: {exc}"

    def _log(self, command: Command) -> EventLog:
        if self.log is None:
            raise command.error("no history yet: start with 'agents A B ...'")
        return self.log

    def _agent(self, command: Command, position: int = 0) -> str:
        agent = command.arg(position)
        if agent not in self.agents:
            raise HistoryError(f"unknown agent {agent!r}")
        return agent

    def history(self, command: Command) -> History:
        return self._log(command).history()

    # ---- building the history ----------------------------------------------------

    def cmd_agents(self, command: Command) -> str:
        if not command.args:
            raise command.error("names no agent")
        self.agents = tuple(command.args)
        self.log = EventLog(self.agents)
        return "agents " + " ".join(self.agents)

    def cmd_checkpoint(self, command: Command) -> str:
        agent = self._agent(command)
        index = self._log(command).checkpoint(agent, command.int_option("index"))
        return f"{agent} checkpoint {index}"

    def cmd_send(self, command: Command) -> str:
        agent, message = self._agent(command), command.arg(1)
        log = self._log(command)
        log.send(agent, message)
        return f"{agent} sends {message} in interval {log.interval(agent)}"

    def cmd_recv(self, command: Command) -> str:
        agent, message = self._agent(command), command.arg(1)
        log = self._log(command)
        log.receive(agent, message)
        return f"{agent} receives {message} in interval {log.interval(agent)}"

    # ---- questions ---------------------------------------------------------------

    def cmd_fail(self, command: Command) -> str:
        command.arg(0)  # at least one failed agent
        history = self.history(command)
        line = rl.recovery_line(history, set(command.args))
        passed = {a: [c for c in history.checkpoints[a] if c > line.cut[a]]  # type: ignore[operator]
                  for a in sorted(line.rolled_back)}
        depth = max((len(cps) for cps in passed.values()), default=0)
        out = [f"line: {show_cut(line.cut)}",
               f"rolled back: {' '.join(sorted(line.rolled_back)) or 'none'}",
               f"domino depth: {depth}"]
        out += [f"{a} passes checkpoints {' '.join(map(str, cps))}" for a, cps in passed.items() if cps]
        return "\n".join(out)

    def cmd_cut(self, command: Command) -> str:
        history = self.history(command)
        cut: rl.Cut = dict.fromkeys(history.checkpoints)
        for agent, value in command.all_options().items():
            if agent not in cut:
                raise HistoryError(f"unknown agent {agent!r}")
            cut[agent] = None if value == CURRENT else command.to_int(value, agent)
        orphans, transit = rl.orphans(history, cut), rl.in_transit(history, cut)
        out = [f"cut: {show_cut(cut)}", "consistent" if not orphans else
               "orphans: " + " ".join(show_message(m) for m in orphans)]
        if transit:
            out.append("in transit: " + " ".join(show_message(m) for m in transit))
        return "\n".join(out)

    def cmd_useless(self, command: Command) -> str:
        useless = sorted(rl.useless_checkpoints(self.history(command)))
        return "useless: " + (" ".join(f"{a}.{c}" for a, c in useless) or "none")

    def cmd_watermark(self, command: Command) -> str:
        marks = rl.gc_watermark(self.history(command), retention=command.int_option("retention", 0) or 0)
        return "keep from: " + " ".join(f"{a}={c}" for a, c in sorted(marks.items()))
