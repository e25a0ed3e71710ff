"""Golden driver for the BCS rules of coordinator.core.cic: each agent runs the
protocol, and the history it produces answers the recovery-line questions of
HistoryDriver, so a script can show that BCS leaves no useless checkpoint."""
from __future__ import annotations

from coordinator.core import cic
from coordinator.core.history import HistoryError
from tests.golden.datadriven import Command
from tests.golden.history_driver import HistoryDriver


class BcsDriver(HistoryDriver):
    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, cic.BcsState] = {}
        self.in_flight: dict[str, bytes] = {}  # message id -> piggyback as sent

    def cmd_agents(self, command: Command) -> str:
        out = super().cmd_agents(command)
        self.states = {a: cic.BcsState() for a in self.agents}
        self.in_flight = {}
        return out

    def cmd_checkpoint(self, command: Command) -> str:
        agent = self._agent(command)
        index = cic.bcs_on_checkpoint(self.states[agent])
        self._log(command).checkpoint(agent, index)
        return f"{agent} basic checkpoint {index}"

    def cmd_send(self, command: Command) -> str:
        agent, message = self._agent(command), command.arg(1)
        self._log(command).send(agent, message)
        piggyback = cic.bcs_on_send(self.states[agent])
        self.in_flight[message] = piggyback
        return f"{agent} sends {message}, piggyback lc={cic.bcs_decode(piggyback)} ({piggyback.hex()})"

    def cmd_recv(self, command: Command) -> str:
        agent, message = self._agent(command), command.arg(1)
        forged = command.option("piggyback")
        if message not in self.in_flight:
            raise HistoryError(f"receive of message {message!r} that was never sent")
        piggyback = self.in_flight[message] if forged is None else bytes.fromhex(forged)
        state, log = self.states[agent], self._log(command)
        own = state.lc
        forced = cic.bcs_forced_index(state, piggyback)  # refuses a malformed piggyback before any change
        out = []
        if forced is not None:
            log.checkpoint(agent, cic.bcs_on_checkpoint(state, forced))
            out.append(f"{agent} forced checkpoint {forced} before {message} (piggyback lc={forced} > own lc={own})")
        log.receive(agent, message)
        out.append(f"{agent} receives {message} in interval {log.interval(agent)}"
                   + ("" if forced is not None else f" (piggyback lc={cic.bcs_decode(piggyback)}, own lc={own})"))
        return "\n".join(out)
