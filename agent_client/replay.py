"""Which recorded calls a run replays after a restore, and when a replay has diverged (pure).

A run is what the agent does after one restore. Its recorded calls (model calls,
tool calls without external effects) are numbered from 0 in the order they start;
the checkpoint the run started from and that position name a call. A restore undoes
everything after its checkpoint, so a run replays nothing unless the agent's
developer chose a horizon: the run's first `horizon` calls get the responses the
calls at the same positions got when the agent last ran from that checkpoint (its
`History`), and every call after them is made live. docs/replay.md says why each
choice exists.

A replayed call must ask what the recorded one asked: its name and the SHA-256 of
its request (canonical JSON) must match, or the replay has diverged and the call is
refused; a response is never handed to a request it was not given for.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, Union

# Where a call stands in the call log: (run id, position in that run).
Coordinate = tuple[int, int]
# The horizon an agent developer chooses: nothing, through the last external effect,
# everything recorded, or the first n calls.
Horizon = Union[Literal["none", "effects", "all"], int]
HORIZONS = ("none", "effects", "all")
COLD_START: Coordinate = (0, 0)  # run 0: the history of an agent that starts without a checkpoint


class ReplayDiverged(RuntimeError):
    """A replayed call asked something else than the recorded call at its position:
    the agent's code, inputs or state differ from the run being replayed."""

    def __init__(self, position: int, name: str, digest: str, recorded: "RecordedCall", origin: str) -> None:
        if name != recorded.name:
            what = f"it calls {name!r} where the recorded run called {recorded.name!r}"
        else:
            what = f"its request digest {digest[:16]} differs from the recorded {recorded.digest[:16]}"
        super().__init__(f"replay diverged at recorded call {position} after {origin}: {what}. The agent's code, "
                         f"inputs or state differ from the recorded run; nothing was called or recorded. "
                         f"Restore again with replay={position} (the calls before this one) to run live from here.")
        self.position, self.name, self.recorded_name = position, name, recorded.name


@dataclass(frozen=True, eq=False)
class RunStart:
    """Where a restore put the agent: the checkpoint's index and the call log
    coordinate it was taken at (None: unknown, e.g. a checkpoint written before calls
    were recorded). Each restore makes a new one: a run lasts until the next."""

    index: int
    coordinate: Coordinate | None

    @classmethod
    def of(cls, index: int, calls: Any) -> "RunStart":
        """From a checkpoint's index and what it recorded as its coordinate."""
        if isinstance(calls, list) and len(calls) == 2 and all(type(v) is int and v >= 0 for v in calls):
            return cls(index, (calls[0], calls[1]))
        return cls(index, COLD_START if index == 0 else None)

    def describe(self) -> str:
        return "a cold start" if self.coordinate == COLD_START and self.index == 0 else f"checkpoint {self.index}"


@dataclass(frozen=True)
class RecordedCall:
    name: str
    digest: str
    response: str  # the response as recorded (JSON text)
    at: Coordinate


@dataclass(frozen=True)
class History:
    """What the agent last did after one checkpoint: its recorded calls in order, the
    positions at which it started external effects (the number of calls made before
    each), and where a run continuing after the last call forks from."""

    calls: tuple[RecordedCall, ...] = ()
    effects: tuple[int, ...] = ()
    end: Coordinate | None = None

    def at(self, position: int) -> Coordinate | None:
        """The call log coordinate of `position`: a run that stops replaying there
        forks from it, and a checkpoint taken there names it."""
        return self.calls[position].at if position < len(self.calls) else self.end


def check_horizon(choice: object) -> Horizon:
    """A valid horizon, or ValueError naming the valid ones."""
    if isinstance(choice, bool) or not (choice in HORIZONS or (isinstance(choice, int) and choice >= 0)):
        raise ValueError(f"replay must be one of {HORIZONS} or a number of calls >= 0, got {choice!r}")
    return choice  # type: ignore[return-value]


def replayed_calls(choice: Horizon, history: History) -> int:
    """How many of the run's first calls are replayed from `history`.

    "effects": every call before the last external effect the history started, so
    what the outside world was told stays what the agent computes; "all": every call
    recorded; n: the first n, as far as they were recorded."""
    if choice == "none":
        return 0
    if choice == "all":
        return len(history.calls)
    if choice == "effects":
        return min(max(history.effects, default=0), len(history.calls))
    return min(int(choice), len(history.calls))


def request_digest(name: str, request: Any) -> str:
    """SHA-256 of the call's name and request as canonical JSON; TypeError if the
    request is not JSON (pass `request=` to recorded() to say what identifies it)."""
    try:
        text = json.dumps([name, request], sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"recorded call {name!r}: its arguments are not JSON ({exc}); pass request= to say "
                        f"what identifies a call as a JSON value") from exc
    return hashlib.sha256(text.encode()).hexdigest()


def encode_response(name: str, response: Any) -> str:
    """The response as it is recorded; TypeError if it is not JSON."""
    try:
        return json.dumps(response, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"recorded call {name!r} returned a value that is not JSON ({exc}); wrap a function "
                        f"that returns JSON (e.g. the model's answer as a dict)") from exc


def check_replayed(position: int, name: str, digest: str, recorded: RecordedCall, origin: str) -> None:
    """ReplayDiverged unless the call asks what the recorded one asked."""
    if name != recorded.name or digest != recorded.digest:
        raise ReplayDiverged(position, name, digest, recorded, origin)
