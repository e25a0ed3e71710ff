"""Golden driver for coordinator.core.state_machine.apply over KvState on the memory
store (commands in datadriven.py's docstring). Results print in one compact line
each (recoveries, GC and `show` in a few); refusals print the core's Code, field and
reason, and the driver checks a refusal left the store as it was."""
from __future__ import annotations

from typing import Any, Callable

from coordinator.core import commands as c
from coordinator.core.history import Dependency
from coordinator.core.model import Agent, Checkpoint, CheckpointKind, GroupSpec, GroupState, Mode, Order, OrderKind
from tests.core.test_state_machine import SHA, Machine
from tests.golden.datadriven import Command, Dispatching

MODES = {"coordinated": Mode.COORDINATED, "bcs": Mode.CIC_BCS, "hmnr": Mode.CIC_HMNR, "fdas": Mode.CIC_FDAS,
         "uncoordinated": Mode.UNCOORDINATED}
MODE_NAMES = {mode: name for name, mode in MODES.items()}


def _members(names: tuple[str, ...]) -> str:
    return " ".join(names) or "none"


def _plural(n: int, word: str, words: str = "") -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def show_order(order: Order) -> str:
    detail = {OrderKind.ROLL_BACK: f"to {order.checkpoint_index}, generation {order.generation}",
              OrderKind.CHECKPOINT_NOW: f"epoch {order.epoch}",
              OrderKind.CHECKPOINT_SUGGESTED: f"every {order.interval_s}s"}[order.kind]
    return f"order {order.order_id}: {order.agent_id} {order.kind.value} {detail}"


class StateMachineDriver(Dispatching):
    def __init__(self) -> None:
        self.machine = Machine()
        self.group: str | None = None

    # ---- plumbing ----------------------------------------------------------------

    def _group(self, command: Command) -> str:
        group = command.option("group", self.group)
        if group is None:
            raise command.error("no group yet: create one or pass group=")
        return group

    def _agent(self, command: Command, group: str) -> Agent | None:
        return self.machine.state.agent(group, command.arg(0))

    def _token(self, command: Command, group: str, epoch: int = 0) -> c.Token:
        agent = self._agent(command, group)
        return c.Token(command.int_option("inc", agent.incarnation if agent else 1), epoch)  # type: ignore[arg-type]

    def _apply(self, command: c.Command) -> c.Result:
        before = self.machine.store.digest()
        result = self.machine.run(command)
        if isinstance(result, c.Failure) and self.machine.store.digest() != before:
            raise AssertionError(f"refused {command} changed the state")
        return result

    def _answer(self, command: c.Command, show: Callable[[Any], str]) -> str:
        return self._format(self._apply(command), show)

    @staticmethod
    def _format(result: c.Result, show: Callable[[Any], str]) -> str:
        if isinstance(result, c.Failure):
            return (f"refused: {result.code.value}/{result.reason_code.value}"
                    f"{' ' + result.field if result.field else ''}: {result.reason}")
        return "ok: " + show(result)

    def _show_group(self, name: str) -> str:
        group = self.machine.state.group(name)
        assert group is not None
        state = "" if group.state is GroupState.RUNNING else f", {group.state.value}"
        return f"group {name} ({MODE_NAMES[group.spec.mode]}), members {_members(group.members)}{state}"

    # ---- commands ----------------------------------------------------------------

    def cmd_create_group(self, command: Command) -> str:
        name = command.arg(0)
        mode = command.option("mode", "coordinated")
        if mode not in MODES:
            raise command.error(f"mode must be one of {', '.join(MODES)}")
        spec = GroupSpec(name, MODES[mode], retention=command.int_option("retention", 2))  # type: ignore[arg-type]
        agents = [a for a in (command.option("agents") or "").split(",") if a]
        result = self._apply(c.CreateGroup(spec))
        if isinstance(result, c.Failure):
            return self._format(result, str)
        self.group = name
        refusals = [self._answer(c.Register(name, a), str) for a in agents]
        return "\n".join(["ok: " + self._show_group(name), *(r for r in refusals if r.startswith("refused"))])

    def cmd_register(self, command: Command) -> str:
        def show(r: c.RegisterResult) -> str:
            resume = "start" if r.resume_from is None else f"checkpoint {r.resume_from.index}"
            recovering = (f", group recovering (recovery {r.group.recovery_id})"
                          if r.group.state is GroupState.RECOVERING else "")
            return (f"{r.agent.agent_id} incarnation {r.agent.incarnation}, generation {r.agent.generation}, "
                    f"resume from {resume}{recovering}")
        return self._answer(c.Register(self._group(command), command.arg(0)), show)

    def cmd_commit(self, command: Command) -> str:
        group, agent, index = self._group(command), command.arg(0), command.int_arg(1)
        epoch = command.int_option("epoch", 0) or 0
        kind = CheckpointKind(command.option("kind", "coordinated" if epoch else "basic"))
        checkpoint = Checkpoint(group, agent, index, epoch, kind, f"file:///blobs/{agent}/{index}",
                                command.option("sha", SHA), 100)  # type: ignore[arg-type]

        def show(r: c.CheckpointResult) -> str:
            cp = r.checkpoint
            stable = "stable" if cp.stable else "not yet stable"
            epoch = f", stable epoch {r.stable_epoch}" if cp.kind is CheckpointKind.COORDINATED else ""
            return f"checkpoint {cp.agent_id}.{cp.index} ({cp.kind.value}, {stable}){epoch}"
        return self._answer(c.CommitCheckpoint(self._token(command, group, epoch), checkpoint), show)

    def cmd_report(self, command: Command) -> str:
        group = self._group(command)
        token = self._token(command, group)
        records = []
        for message, text in command.all_options().items():
            if message in ("inc", "group"):
                continue
            try:
                send, receive = text.split(">")
                sender, send_interval = send.rsplit(".", 1)
                receive, _, generation = receive.partition("@")
                receiver, receive_interval = receive.rsplit(".", 1)
                records.append(Dependency(sender, int(send_interval), receiver, int(receive_interval), message,
                                          int(generation or 0)))
            except ValueError:
                raise command.error(f"{message}={text}: want SENDER.INTERVAL>RECEIVER.INTERVAL[@GENERATION]") from None
        return self._answer(c.ReportDependencies(group, command.arg(0), token, tuple(records)),
                            lambda r: f"{_plural(r.accepted, 'dependency', 'dependencies')} accepted")

    def cmd_start_epoch(self, command: Command) -> str:
        return self._answer(c.StartEpoch(self._group(command)),
                            lambda r: f"epoch {r.epoch.epoch} started, members {_members(r.epoch.members)}")

    def cmd_abort_epoch(self, command: Command) -> str:
        reason = command.option("reason", "aborted")
        abort = c.AbortEpoch(self._group(command), command.int_arg(0), reason)  # type: ignore[arg-type]
        return self._answer(abort, lambda r: f"epoch {r.epoch.epoch} {r.epoch.state.value} ({r.epoch.reason})")

    def cmd_fail(self, command: Command) -> str:
        group = self._group(command)
        incarnation = self._token(command, group).incarnation

        def show(r: c.RecoveryResult) -> str:
            if not r.targets:
                return "nothing to recover"
            return "\n".join([f"recovery {r.recovery_id}", *(
                f"{t.agent_id} rolls back to {t.checkpoint_index} ({_plural(t.intervals_lost, 'interval')} lost)"
                for t in sorted(r.targets, key=lambda t: t.agent_id))])
        return self._answer(c.DeclareAgentFailed(group, command.arg(0), incarnation), show)

    def cmd_ack(self, command: Command) -> str:
        group, agent = self._group(command), command.arg(0)
        order_id = command.int_option("order")
        if order_id is None:
            mine = [o.order_id for o in self.machine.state.orders(group) if o.agent_id == agent]
            if len(mine) != 1:
                raise command.error(f"{agent} has {len(mine)} orders; say which with order=")
            order_id = mine[0]
        return self._answer(c.AckOrder(group, agent, self._token(command, group), order_id),
                            lambda r: f"order {order_id} done, group {r.group_state.value}")

    def cmd_deregister(self, command: Command) -> str:
        group = self._group(command)
        return self._answer(c.Deregister(group, command.arg(0), self._token(command, group)),
                            lambda r: f"{command.arg(0)} left {group}")

    def cmd_gc(self, command: Command) -> str:
        def show(r: c.GcResult) -> str:
            return "\n".join([f"{_plural(r.checkpoints_deleted, 'checkpoint')} deleted, {r.bytes} bytes",
                              *(f"delete {uri}" for uri in sorted(r.deletable_blob_uris))])
        return self._answer(c.GarbageCollect(self._group(command)), show)

    def cmd_orders(self, command: Command) -> str:
        orders = self.machine.state.orders(self._group(command))
        return "\n".join(show_order(o) for o in orders) or "no orders"

    def cmd_show(self, command: Command) -> str:
        group = self._group(command)
        state = self.machine.state
        out = [self._show_group(group)]
        for agent in state.agents(group):
            cps = " ".join(f"{cp.index}{'' if cp.stable else '?'}" for cp in state.checkpoints(group, agent.agent_id))
            out.append(f"{agent.agent_id}: {agent.state.value}, incarnation {agent.incarnation}, generation "
                       f"{agent.generation}, checkpoints {cps or 'none'}, floor {agent.rollback_floor}")
        deps = state.dependencies(group)
        out.append("dependencies: " + (" ".join(
            f"{d.message_id}={d.sender}.{d.send_interval}>{d.receiver}.{d.receive_interval}" for d in deps) or "none"))
        return "\n".join(out)
