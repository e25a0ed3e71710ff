"""Every request the agent workload makes for one group, as a history operation.

Requests to the group's agent processes are ops of the group's process ("agents-<mode>",
or another one the caller names); admin calls to the coordinator are ops of
"agents-<mode>-admin". An op is `ok` with the reply, `fail` for a refusal the
coordinator decided, `info` when the outcome is unknown. None carries a request id in
its value, so the metadata invariants, which index requests by it, leave these
groups alone.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from chaos.client import Outcome, RecordingClient, Request
from chaos.history import FAIL, INFO, OK, History, Op
from chaos.tokens.process import AgentDied
from coordinator.api.v1 import coordinator_pb2 as pb

DEFINITE = ("FAILED_PRECONDITION", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS")


def definite(error: str) -> bool:
    """Whether an agent's error is a refusal the coordinator decided (not an unknown outcome)."""
    return any(code + ":" in error for code in DEFINITE)


def _brief(reply: Mapping[str, Any]) -> dict[str, Any]:
    """A reply as the history keeps it: without envelopes and long lists."""
    return {k: v for k, v in reply.items() if k not in ("envelope", "redelivered", "rollbacks", "in_transit")}


def _nothing(response: Any) -> None:
    return None


def _group_state(response: pb.GetGroupResponse) -> dict[str, Any]:
    return {"state": pb.GroupState.Name(response.group.state), "recovery_id": response.group.recovery_id}


def _epoch(response: pb.StartEpochResponse) -> dict[str, Any]:
    return {"epoch": response.epoch.epoch}


class GroupCalls:
    def __init__(self, history: History, process: str, group: str, endpoints: Sequence[str], *,
                 admin_deadline_s: float, on_died: Callable[[str], None]) -> None:
        """`on_died(agent)`: an agent process did not answer (it may still run)."""
        self.history, self.process, self.group = history, process, group
        self.admin = RecordingClient(history, f"{process}-admin", endpoints, deadline=admin_deadline_s,
                                     rpc_timeout=1.0)
        self.sent_ops: dict[str, Op] = {}  # message id -> the op that sent it, for counter-examples
        self._on_died = on_died
        self._rids = 0

    # ---- the agent processes -------------------------------------------------------------
    def agent(self, agent: str, f: str, value: dict[str, Any], thunk: Callable[[], dict[str, Any]],
              process: str | None = None) -> dict[str, Any]:
        """One request to an agent process (`thunk`), recorded; raises what it raised."""
        process = process or self.process
        self.history.invoke(process, f, {"group": self.group, "agent": agent, **value})
        try:
            reply = thunk()
        except AgentDied as exc:
            self.history.complete(process, INFO, error=f"AgentDied: {exc}")
            self._on_died(agent)
            raise
        except RuntimeError as exc:
            self.history.complete(process, FAIL if definite(str(exc)) else INFO, error=str(exc))
            raise
        op = self.history.complete(process, OK, _brief(reply))
        if f == "send" and reply.get("id"):
            self.sent_ops[reply["id"]] = op
        return reply

    def journal(self, agent: str, ev: Mapping[str, Any]) -> None:
        """What an agent's journal says it did on its own (recovery lines, re-deliveries,
        acknowledged checkpoints), as a note."""
        kind = ev.get("ev")
        if kind in ("line", "redelivered", "commit"):
            self.history.note(self.process, {"line": "recovery-line", "redelivered": "redelivered",
                                             "commit": "checkpoint-acknowledged"}[kind],
                              {"group": self.group, "agent": agent, **{k: v for k, v in ev.items() if k != "ev"}})

    # ---- the coordinator -----------------------------------------------------------------
    def rid(self, what: str) -> str:
        self._rids += 1
        return f"{self.group}-{what}-{self._rids}"

    def call(self, f: str, method: str, message: Any, value: dict[str, Any],
             answer: Callable[[Any], Any] = _nothing) -> Outcome:
        """An admin call, recorded (`answer` says what of the response the op keeps)."""
        return self.send(Request(f, "AdminService", method, message, {"group": self.group, **value}, answer))

    def send(self, request: Request) -> Outcome:
        """A prepared admin request, recorded (sent again as is after an unknown outcome)."""
        return self.admin.send(request)

    def group_info(self, *, keep_answer: bool = True) -> Outcome:
        return self.call("get_group", "GetGroup", pb.GetGroupRequest(group=self.group), {},
                         _group_state if keep_answer else _nothing)

    def start_epoch(self, *, keep_answer: bool = True) -> Outcome:
        return self.call("start_epoch", "StartEpoch", pb.StartEpochRequest(request_id=self.rid("epoch"),
                                                                           group=self.group), {},
                         _epoch if keep_answer else _nothing)

    def list_checkpoints(self) -> list[pb.CheckpointMeta] | None:
        """Every listed checkpoint of the group, or None if the answer is not known."""
        outcome = self.call("list_checkpoints", "ListCheckpoints", pb.ListCheckpointsRequest(group=self.group), {},
                            lambda r: {"checkpoints": len(r.checkpoints)})
        return list(outcome.response.checkpoints) if outcome.ok else None

    def close(self) -> None:
        self.admin.close()


__all__ = ["DEFINITE", "GroupCalls", "definite"]
