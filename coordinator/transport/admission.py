"""Bounded admission: refuse new work with RESOURCE_EXHAUSTED (REASON_OVERLOADED) and a
retry hint before the event loop backs up, instead of letting every call wait until
its deadline. The decision is core.overload.admit; this module measures the load it
decides on and answers the refusal.

The measured lags are refreshed by the loop-lag task (every LoopLag period), not per
call: a refused call costs a dictionary look-up and two comparisons before its
refusal, which is what keeps shedding cheaper than serving.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import grpc

from coordinator.api.metadata import RETRY_AFTER_METADATA_KEY
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.core.overload import AdmissionLimits, Load, Shed, Work, admit
from coordinator.observability import metrics
from coordinator.observability.loop_lag import LoopLag
from coordinator.transport.status_map import Refused, abort_with

# What each method asks of the node. Methods not named here (ClusterStatus, membership,
# health, reflection) are never shed: operators need them most when the node is loaded.
WORK_OF_METHOD: dict[str, Work] = {
    "Heartbeat": Work.KEEPALIVE,
    **dict.fromkeys(("Register", "CommitCheckpoint", "ReportDependencies", "AckOrder", "Deregister",
                     "CreateGroup", "StartEpoch", "GarbageCollect", "DeleteGroup", "ResetDedupeClock",
                     "CreateSavepoint", "DeleteSavepoint", "SetRetention", "RestoreGroup", "ForkGroup", "WatchOrders",
                     "Session"),
                    Work.WRITE),  # a new stream takes a read point (a quorum round)
    **dict.fromkeys(("GetGroup", "ListCheckpoints", "WhatIf", "SaveSnapshot", "ListSavepoints", "ListGroups",
                     "ListDependencies"), Work.READ),
}
# The worst lag within this many seconds decides: a burst keeps shedding on a little
# after the loop catches up, so the backlog it left drains first. The event loop's lag
# counts only once two samples in a row saw it (LoopLag.sustained_since): a single pause,
# such as a collection of the process's garbage, is over before it is measured.
LAG_WINDOW_S = 1.0


class Admission:
    """The node's admission gate: what is in flight, how late it runs, and the decision."""

    def __init__(self, limits: AdmissionLimits = AdmissionLimits(), *,
                 proposals_waiting: Callable[[], int] = lambda: 0,
                 tick_lag_since: Callable[[float], float] = lambda since: 0.0,
                 leads: Callable[[], bool] = lambda: True,
                 loop_lag: LoopLag | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._leads = leads
        self.loop_lag = loop_lag or LoopLag(monotonic=monotonic)
        self._proposals_waiting = proposals_waiting
        self._tick_lag_since = tick_lag_since
        self._monotonic = monotonic
        self.rpcs_in_flight = 0
        self.keepalives_shed = 0  # ever: the failure detector reads its growth per tick
        self.loop_lag_s = 0.0  # the worst (reported by ClusterStatus and the gauge)
        self.loop_lag_sustained_s = 0.0  # what admission judges
        self.tick_lag_s = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Measure the loop's lag (and refresh the tick lag with it) until `stop` is set."""
        await self.loop_lag.run(stop, on_sample=self.refresh)

    def refresh(self) -> None:
        since = self._monotonic() - LAG_WINDOW_S
        self.loop_lag_s = self.loop_lag.worst_since(since)
        self.loop_lag_sustained_s = self.loop_lag.sustained_since(since)
        self.tick_lag_s = self._tick_lag_since(since)
        metrics.LOOP_LAG.set(self.loop_lag_s)

    def check(self, work: Work) -> Shed | None:
        """Every method judged here is served by the leader only. A node that does not
        lead sheds none of them: its handler refuses with the leader's address before it
        proposes or reads anything (Proposer.require_leader), which sends the client where
        it can be served, where a load refusal would have it wait and ask this node again."""
        if not self._leads():
            return None
        shed = admit(work, Load(self._proposals_waiting(), self.rpcs_in_flight, self.loop_lag_sustained_s,
                                self.tick_lag_s),
                     self.limits)
        if shed is not None:
            metrics.SHED.labels(work.value).inc()
            if work is Work.KEEPALIVE:
                self.keepalives_shed += 1
        return shed


def _refusal(shed: Shed) -> Rejection:
    return Rejection.because(ReasonCode.OVERLOADED, f"overloaded ({shed.why}); retry later")


async def refuse(context: grpc.aio.ServicerContext, shed: Shed) -> None:
    """End the call with RESOURCE_EXHAUSTED, REASON_OVERLOADED and the retry hint."""
    await abort_with(context, _refusal(shed), trailers=((RETRY_AFTER_METADATA_KEY, f"{shed.retry_after_s:.3f}"),))


def refused_frame(shed: Shed) -> pb.FrameStatus:
    """The same refusal as a session frame's answer: the hint in the status itself."""
    status = Refused.of(_refusal(shed)).to_pb()
    status.retry_after_s = round(shed.retry_after_s, 3)
    return status
