"""Hand-made histories with explicit times, in the metadata workload's value schema.

Every call gets its own process unless one is given, so calls may overlap freely;
`ops()` returns them in time order with fresh indexes, as History would have.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from chaos.history import FAULT, HEAL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.sampler import FINAL, SAMPLE, SAMPLER


SOON = object()  # the default end: 10 ms after the start; end=None: never completes


def _end(start: float, end: Any) -> float | None:
    return start + 0.01 if end is SOON else end


class Script:
    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._ids = itertools.count(1)

    def ops(self) -> list[Op]:
        ordered = sorted(self._ops, key=lambda op: op.time)
        return [dataclasses.replace(op, index=i) for i, op in enumerate(ordered)]

    def _add(self, time: float, process: str, type_: str, f: str, value: Any = None, error: str | None = None) -> None:
        self._ops.append(Op(len(self._ops), time, process, type_, f, value, "n1", error))

    def call(self, f: str, value: dict[str, Any], answer: Any = None, *, start: float, end: float | None = None,
             outcome: str = OK, error: str | None = None, process: str | None = None, rid: str | None = None) -> str:
        """Invoke at `start`, complete at `end` (no completion when end is None); returns the rid."""
        rid = rid or f"r{next(self._ids)}"
        process = process or f"c{next(self._ids)}"
        self._add(start, process, INVOKE, f, {"rid": rid, **value})
        if end is not None:
            self._add(end, process, outcome, f, answer if outcome == OK else None, error)
        return rid

    # ---- the workload's operations ------------------------------------------------
    def create_group(self, group: str, mode: str = "CIC_BCS", *, at: float = 0.0, retention: int = 0) -> None:
        self.call("create_group", {"group": group, "mode": mode, "checkpoint_interval_s": 0.0,
                                   "checkpoint_cost_s": 0.0, "mtbf_s": 0.0, "lease_ttl_s": 3600.0,
                                   "retention": retention},
                  {"current_epoch": 0, "stable_epoch": 0}, start=at, end=at + 0.01)

    def register(self, group: str, agent: str, incarnation: int, *, start: float, end: Any = SOON,
                 recovery_id: int = 0, current: int = 0, stable: int = 0, **kw: Any) -> str:
        return self.call("register", {"group": group, "agent": agent},
                         {"incarnation": incarnation, "current_epoch": current, "stable_epoch": stable,
                          "recovery_id": recovery_id}, start=start, end=_end(start, end), **kw)

    def commit(self, group: str, agent: str, index: int, *, start: float, end: Any = SOON,
               incarnation: int = 1, epoch: int = 0, stable_epoch: int = 0, answered_epoch: int | None = None,
               **kw: Any) -> str:
        uri, sha = f"mem://{group}/{agent}/{index}", f"{index:064x}"
        kind = "COORDINATED_CUT" if epoch else "BASIC"
        value = {"group": group, "agent": agent, "incarnation": incarnation, "epoch": epoch, "index": index,
                 "kind": kind, "blob_uri": uri, "sha256": sha}
        answer = {"index": index, "epoch": epoch if answered_epoch is None else answered_epoch, "stable": True,
                  "stable_epoch": stable_epoch, "incarnation": incarnation, "created_at": 1000.0 + index,
                  "blob_uri": uri, "sha256": sha}
        return self.call("commit", value, answer, start=start, end=_end(start, end), **kw)

    def deps(self, group: str, agent: str, deps: list[tuple[str, int, str, int, str]], *, start: float,
             end: Any = SOON, incarnation: int = 1, **kw: Any) -> str:
        return self.call("report_deps", {"group": group, "agent": agent, "incarnation": incarnation,
                                         "deps": [list(d) for d in deps]},
                         {"accepted": len(deps)}, start=start, end=_end(start, end), **kw)

    @staticmethod
    def epoch(epoch: int, state: str, members: list[str], committed: list[str] | None = None) -> dict[str, Any]:
        return {"epoch": epoch, "state": state, "members": members, "committed": committed or []}

    def start_epoch(self, group: str, epoch: int, members: list[str], *, start: float, **kw: Any) -> str:
        return self.call("start_epoch", {"group": group}, {"epoch": self.epoch(epoch, "EPOCH_STARTED", members)},
                         start=start, end=start + 0.01, **kw)

    def get_group(self, group: str, *, start: float, end: Any = SOON, current: int = 0, stable: int = 0,
                  recovery_id: int = 0, state: str = "RUNNING", agents: dict[str, int] | None = None,
                  epochs: list[dict[str, Any]] | None = None) -> str:
        answer = {"current_epoch": current, "stable_epoch": stable, "state": state, "recovery_id": recovery_id,
                  "agents": {a: {"incarnation": i, "state": "AGENT_ALIVE", "last_index": 0}
                             for a, i in (agents or {}).items()},
                  "epochs": epochs or []}
        return self.call("get_group", {"group": group}, answer, start=start, end=_end(start, end))

    def listed(self, group: str, cps: list[tuple[str, int]], *, at: float, changed: tuple[str, int] | None = None,
               restamped: tuple[str, int] | None = None) -> str:
        entries = [{"agent": a, "index": i, "epoch": 0, "blob_uri": f"mem://{group}/{a}/{i}",
                    "sha256": f"{i + 1000 * ((a, i) == changed):064x}", "stable": True,
                    "created_at": 1000.0 + i + 0.5 * ((a, i) == restamped)} for a, i in cps]
        return self.call("list_checkpoints", {"group": group}, {"checkpoints": entries}, start=at, end=at + 0.01)

    def watch(self, group: str, agent: str, orders: list[tuple[int, int, int]], *, at: float) -> str:
        """orders: (order_id, checkpoint_index, recovery_id) rollback orders."""
        answer = {"orders": [{"order_id": o, "kind": "roll_back", "checkpoint_index": c, "recovery_id": r, "epoch": 0}
                             for o, c, r in orders]}
        return self.call("watch_orders", {"group": group, "agent": agent}, answer, start=at, end=at + 0.01)

    def ack(self, group: str, agent: str, order_id: int, group_state: str = "RECOVERING", *, start: float,
            end: Any = SOON, **kw: Any) -> str:
        return self.call("ack_order", {"group": group, "agent": agent, "incarnation": 1, "order_id": order_id},
                         {"group_state": group_state}, start=start, end=_end(start, end), **kw)

    def what_if(self, group: str, failed: list[str], targets: dict[str, int], *, at: float) -> str:
        return self.call("what_if", {"group": group, "failed": failed}, {"targets": targets}, start=at, end=at + 0.01)

    def gc(self, group: str, uris: list[str], *, at: float, **kw: Any) -> str:
        return self.call("gc", {"group": group}, {"uris": uris, "bytes": 100 * len(uris)}, start=at, end=at + 0.01,
                         **kw)

    # ---- samples and the nemesis ------------------------------------------------------
    def sample(self, node: str, index: int, digest: str, *, at: float) -> None:
        self._ops.append(Op(0, at, SAMPLER, INFO, SAMPLE, {"digest_index": index, "content_digest": digest}, node))

    def final(self, nodes: dict[str, tuple[int, str] | None], *, at: float) -> None:
        samples = {n: None if s is None else {"digest_index": s[0], "content_digest": s[1]} for n, s in nodes.items()}
        converged = len({s for s in nodes.values()}) == 1 and None not in nodes.values()
        self._ops.append(Op(0, at, SAMPLER, INFO, FINAL, {"converged": converged, "nodes": samples}))

    def fault(self, kind: str, *, at: float) -> None:
        self._ops.append(Op(0, at, NEMESIS, INFO, kind, {"phase": FAULT}))

    def heal(self, kind: str, *, at: float) -> None:
        self._ops.append(Op(0, at, NEMESIS, INFO, kind, {"phase": HEAL}))

