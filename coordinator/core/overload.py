"""Overload decisions, pure: which work a saturated node refuses, and when the leader's
failure detector must not believe its own silence.

At about a thousand heartbeating agents a leader's event loop fell behind: heartbeats
waited seconds in its queues, timed out at the client, and the leader then declared
healthy agents FAILED (each one a needless rollback) while its Raft thread, starved of
the interpreter, missed its own heartbeats and lost the lead. Two rules stop overload
from turning into false failure detection:

- Admission (`admit`): refuse new work early, with RESOURCE_EXHAUSTED and a retry
  hint, before queues grow: by the proposals waiting, the RPCs in flight, and the
  measured lag of the event loop and of the Raft tick. Keepalives are the last work
  shed: they are cheap, and each one refused is a lease closer to a false failure.
- Detector credit (`stall_credit`): while the leader itself lags, it cannot tell a
  silent agent from a heartbeat it failed to hear. Each detector tick that saw the
  leader stall (its own tick gap, loop or tick lag above a threshold, or a keepalive
  shed) declares no failure and credits every lease with the whole window, as etcd
  keeps leases alive across a leader that could not have heard their keepalives.

Times and lags arrive as arguments; nothing here reads a clock.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum


class Work(Enum):
    """What an RPC asks of the node, in the order it is shed (first to last)."""

    READ = "read"  # admin reads: the caller can look again later
    WRITE = "write"  # a proposal through Raft: the dearest per call
    KEEPALIVE = "keepalive"  # a heartbeat: cheap, and refusing it endangers a lease


@dataclass(frozen=True)
class Load:
    """What the node measured just before deciding on one call."""

    proposals_waiting: int  # commands queued or in Raft, not yet answered
    rpcs_in_flight: int  # unary calls being handled (streams excluded: they idle)
    loop_lag_s: float  # the event loop's worst recent lateness seen twice in a row (LoopLag.sustained_since)
    tick_lag_s: float  # the Raft tick's worst recent lateness


@dataclass(frozen=True)
class AdmissionLimits:
    """Where shedding starts. The lag bounds are well under the client's RPC timeout
    (5 s) and the Raft election timeout (1-2 s by default): a call refused at once is better
    than one that waits to time out, and Raft must keep enough of the interpreter to
    send its heartbeats."""

    max_proposals_waiting: int = 2048
    max_rpcs_in_flight: int = 1024
    lag_s: float = 0.25  # reads and writes are refused beyond this lag
    keepalive_lag_s: float = 1.0  # heartbeats only beyond this one
    min_retry_s: float = 0.2
    max_retry_s: float = 5.0

    def __post_init__(self) -> None:
        if not (self.max_proposals_waiting > 0 and self.max_rpcs_in_flight > 0):
            raise ValueError("admission limits must be positive")
        if not 0 < self.lag_s <= self.keepalive_lag_s:
            raise ValueError("need 0 < lag_s <= keepalive_lag_s: keepalives are shed last")
        if not 0 < self.min_retry_s <= self.max_retry_s:
            raise ValueError("need 0 < min_retry_s <= max_retry_s")


@dataclass(frozen=True)
class Shed:
    """A refusal: why, and how long the client should wait before trying again."""

    why: str
    retry_after_s: float


def admit(work: Work, load: Load, limits: AdmissionLimits) -> Shed | None:
    """None to admit the call; else why it is refused and when to come back.

    Keepalives ignore the proposal and RPC counts (a heartbeat proposes nothing and is
    answered from memory) and are refused only past `keepalive_lag_s`; the retry hint
    grows with the lag, so clients back off as far as the node is behind."""
    lag = max(load.loop_lag_s, load.tick_lag_s)
    if work is Work.KEEPALIVE:
        if lag > limits.keepalive_lag_s:
            return Shed(f"node lagging {lag:.2f}s", _retry_after(lag, limits))
        return None
    if lag > limits.lag_s:
        return Shed(f"node lagging {lag:.2f}s", _retry_after(lag, limits))
    if work is Work.WRITE and load.proposals_waiting >= limits.max_proposals_waiting:
        return Shed(f"{load.proposals_waiting} proposals waiting", _retry_after(lag, limits))
    if load.rpcs_in_flight >= limits.max_rpcs_in_flight:
        return Shed(f"{load.rpcs_in_flight} calls in flight", _retry_after(lag, limits))
    return None


def _retry_after(lag: float, limits: AdmissionLimits) -> float:
    """Twice the lag: by then the backlog that caused it has likely drained."""
    return min(limits.max_retry_s, max(limits.min_retry_s, 2 * lag))


class LagWindow:
    """The worst lateness sampled within the last `horizon_s` seconds.

    A sample is (time it was taken, lateness); readers ask for the worst since some
    time, so a spike is seen by every reader whose window covers it, not only by the
    first one to look.

    It also keeps lateness seen twice in a row (`worst_twice_since`): one pause (a
    garbage collection, or the process the loop shares stalling it) shows in one sample
    and is over once it is measured; overload shows in every sample until it is gone.
    Samples on time are counted (`on_time`) but not stored, so an idle window stays empty."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._samples: deque[tuple[float, float, float]] = deque()  # (at, lag, lesser of it and the one before)
        self.last_lag_s = 0.0  # the latest sample's lateness, stored or not

    def add(self, at: float, lag_s: float) -> None:
        lag = max(0.0, lag_s)
        self._samples.append((at, lag, min(lag, self.last_lag_s)))
        self.last_lag_s = lag
        while self._samples and self._samples[0][0] < at - self.horizon_s:
            self._samples.popleft()

    def on_time(self) -> None:
        """A sample within the noise: it ends a run of late ones."""
        self.last_lag_s = 0.0

    def worst_since(self, since: float) -> float:
        return self._worst(since, 1)

    def worst_twice_since(self, since: float) -> float:
        """The worst lateness that two consecutive samples both reached, the later of
        them taken since `since`."""
        return self._worst(since, 2)

    def _worst(self, since: float, field: int) -> float:
        worst = 0.0
        for sample in reversed(self._samples):  # newest first: stop at the first one too old
            if sample[0] < since:
                break
            worst = max(worst, sample[field])
        return worst


@dataclass(frozen=True)
class DetectorTick:
    """What the failure detector measured over one tick window of the leader."""

    gap_s: float  # time since the previous detector tick
    period_s: float  # the intended time between ticks
    loop_lag_s: float  # worst event-loop lag within the window
    tick_lag_s: float  # worst Raft tick lag within the window
    keepalives_shed: int  # heartbeats refused by admission within the window


# The leader is not trusted to have heard keepalives over a window in which any of these
# lags exceeded this: a heartbeat that waited this long in a queue may have timed out.
STALL_THRESHOLD_S = 0.5


def stall_credit(tick: DetectorTick, threshold_s: float = STALL_THRESHOLD_S) -> float:
    """Seconds to add to every lease for this window; 0 when the leader was healthy.

    A stalled window is credited whole (the gap, not only its excess over the period):
    the leader cannot say which part of it it was deaf in. Never more than the gap: a
    lag that outlasts the window is credited again by the windows it spans, and
    crediting it in each would add up to more time than passed. While the credit is
    positive no failure is declared either: an expiry computed in a stalled window is
    the leader's lateness as much as the agent's silence."""
    late = max(tick.gap_s - tick.period_s, tick.loop_lag_s, tick.tick_lag_s)
    if late > threshold_s or tick.keepalives_shed > 0:
        return tick.gap_s
    return 0.0

