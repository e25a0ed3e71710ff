"""The request-id -> result table: how long it remembers, decided from the log
alone, and whose answer it gives to which command.

Every answer is kept under its request id so a retry is answered, not applied
again. Keeping them for ever grows without bound, so answers are forgotten once
their request is older than a window -- and a request that old is then refused
("too old to deduplicate") instead of applied, so forgetting can never let a
retry apply twice:

- A request's age is measured from `issued_at`, the time its client first sent it
  and repeats unchanged on every retry (entries without one use the time they were
  proposed, which protects retries only within the window of the first attempt).
- `clock_ms` is the largest `proposed_at` applied so far: it never goes back, even
  when a new leader's wall clock is behind the old one's.
- `watermark_ms` only rises, to `clock_ms - window`. An answer is forgotten only
  when its request was issued before the watermark, and a request issued before
  the watermark is refused. Both compare the same integer to the same monotone
  watermark, so a forgotten request can only ever be refused -- whatever the
  clocks, and even if the window setting changes between leaders.

An operator's reset (`reset`, ResetDedupeClock) is the one move backwards: after
a leader whose clock was far ahead pushed the clock and watermark forward, every
honest request looks too old. The reset puts both at the reset's own time and
marks every answer recorded so far as forgettable (`forget_before`): a request
issued before the reset is then answered while its answer is remembered and
refused as too old after, so none applies twice. (A client whose clock is ahead
of the cluster's could have a request issued after the reset by its clock,
answered before and forgotten: such a retry is the one a reset can apply again.)

Answers are queued in the order they were recorded (sequence numbers `head` to
`tail`), and each applied entry forgets at most a bounded number from the head, so
an apply never does unbounded work. Pure and deterministic: every replica forgets
the same answers at the same log index.

Whose answer it is. Request ids are chosen by clients, so one identity can use an
id another identity used. Answers are therefore kept per (identity, request id)
(`namespace`), and each with the `fingerprint` of the command it answered: a
replay from another identity is that identity's own request (its command is
checked and applied as any other), and the same identity sending another command
under an id it used is refused (`reuse`), never answered with the first command's
result -- that result may carry what the second command's sender must not see
(a registration's resume point, a checkpoint's metadata), and answering it would
tell that sender a command it never applied succeeded.

Compatibility: a version before this one kept answers under the request id alone,
without the command's fingerprint. Those answers are not given to anyone (whose
they were is unknown) and the request is not applied again (it may be a retry of
that very request): it is refused (`unattributed`). They are forgotten as any
other once the watermark passes them, so this lasts one dedupe window after the
upgrade; `DedupeClock.unattributed_until` says when none can remain, after which
they are not looked up at all. While nodes of both versions run (a rolling upgrade)
they change the state alike -- a retry is answered on both, a new request applied
on both, a refusal writes nothing -- except when a second identity sends an id a
first one used: the earlier version answers it with the first's answer, this one
applies it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from coordinator.core import codec
from coordinator.core.authz import Grant
from coordinator.core.errors import ReasonCode, Rejection

# Answers forgotten per applied log entry at most, plus PRUNE_PER_RECORD per answer
# the entry recorded: pruning always outpaces recording, yet stays bounded.
PRUNE_PER_ENTRY = 16
PRUNE_PER_RECORD = 2


@dataclass(frozen=True)
class DedupeClock:
    clock_ms: int = 0
    watermark_ms: int = 0
    head: int = 0  # sequence number of the oldest remembered answer
    tail: int = 0  # sequence number the next answer gets
    # Answers numbered below this were kept by request id alone (see the module's
    # docstring); None: a clock that version wrote, under which every answer was.
    unattributed_until: int | None = None
    # Answers numbered below this may go whatever their issue time: those recorded
    # before the last reset (`reset`).
    forget_before: int = 0


def to_ms(seconds: float) -> int:
    """Whole milliseconds; the same float gives the same integer on every replica."""
    return int(seconds * 1000) if math.isfinite(seconds) and seconds > 0 else 0


def advance(clock: DedupeClock, proposed_at: float, window_s: float) -> DedupeClock:
    """The clock after an entry proposed at `proposed_at` under a window of `window_s`
    (0: the proposer set no window, the watermark stays where it is)."""
    now = max(clock.clock_ms, to_ms(proposed_at))
    watermark = clock.watermark_ms
    if window_s > 0 and math.isfinite(window_s):
        watermark = max(watermark, now - to_ms(window_s))
    if (now, watermark) == (clock.clock_ms, clock.watermark_ms):
        return clock
    return dataclasses.replace(clock, clock_ms=now, watermark_ms=watermark)


def reset(clock: DedupeClock, proposed_at: float, tail: int) -> DedupeClock:
    """The clock and watermark put at `proposed_at`, forwards or backwards, and every
    answer recorded so far (those numbered below `tail`) forgettable."""
    at = to_ms(proposed_at)
    return dataclasses.replace(clock, clock_ms=at, watermark_ms=at, forget_before=tail)


def admit(clock: DedupeClock, issued_ms: int, window_s: float) -> Rejection | None:
    """Why a request that has no remembered answer must not be applied, if it must not.

    Too old: its answer may already be forgotten. Too far ahead of the clock: its
    answer would have to be kept for longer than the window (a client clock far
    ahead); refused rather than clamped, since a clamped time would differ between
    the first attempt and a retry."""
    if issued_ms < clock.watermark_ms:
        return Rejection.because(
            ReasonCode.REQUEST_TOO_OLD,
            f"request too old to deduplicate: issued {(clock.clock_ms - issued_ms) / 1000:.3f}s before the "
            f"coordinator's clock, answers older than {(clock.clock_ms - clock.watermark_ms) / 1000:.0f}s "
            f"are forgotten; its outcome is unknown -- check the state, then use a new request_id", "issued_at")
    if window_s > 0 and issued_ms > clock.clock_ms + to_ms(window_s):
        return Rejection.because(
            ReasonCode.CLOCK_AHEAD, f"{(issued_ms - clock.clock_ms) / 1000:.3f}s ahead of the coordinator's "
            f"clock (more than the {window_s:.0f}s dedupe window); check the client's clock", "issued_at")
    return None


def forgettable(clock: DedupeClock, issued_ms: int) -> bool:
    """Whether the oldest remembered answer, issued at `issued_ms`, may go."""
    return issued_ms < clock.watermark_ms


def prune_budget(records: int) -> int:
    return PRUNE_PER_ENTRY + PRUNE_PER_RECORD * records


# ---- whose answer, to which command --------------------------------------------

# The zero values a field may hold: such a field counts as absent from a fingerprint.
_ZERO: tuple[Any, ...] = (None, "", 0, [], {})


def namespace(principal: Grant | None) -> str:
    """Whose request ids an entry's id is among: its principal's identity. Entries
    without a principal (the leader's own, and every client of a node that runs
    without authentication, where no one is told apart) share "", which no
    authenticated identity is (bindings name identities of one character or more)."""
    return "" if principal is None else principal.identity


def fingerprint(command: object) -> str:
    """SHA-256 (hex) of the command's kind and of its fields in the codec's canonical
    form, fields holding a zero value left out.

    Computed from the decoded command alone, so every replica, a restarted node and
    a retry all compute the same one. Zero-valued fields are left out as protobuf
    leaves them off the wire: a field added later with a zero default leaves the
    fingerprint of every command that does not use it unchanged, so a retry that
    spans such an upgrade still matches its first attempt."""
    canonical = json.dumps([type(command).__name__, _present(codec.to_plain(command))], sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _present(plain: Any) -> Any:
    if isinstance(plain, dict):
        kept = {name: _present(value) for name, value in plain.items()}
        return {name: value for name, value in kept.items() if value not in _ZERO}
    if isinstance(plain, list):
        return [_present(value) for value in plain]
    return plain


def reuse(request_id: str, remembered: str, fingerprint: str) -> Rejection | None:
    """Why an identity's remembered answer under `request_id`, given to the command
    whose fingerprint is `remembered`, must not answer a command with `fingerprint`,
    if it must not: it answered another command."""
    if remembered == fingerprint:
        return None
    return Rejection.because(
        ReasonCode.REQUEST_ID_REUSED, f"request id {request_id!r} was already used by this identity for another "
        "command: it is not applied; use a new request_id for a new command", "request_id")


def unattributed(request_id: str) -> Rejection:
    """The refusal of a request whose id has an answer kept by request id alone."""
    return Rejection.because(
        ReasonCode.REQUEST_ID_REUSED, f"request id {request_id!r} was answered by an earlier coordinator version, "
        "which did not record whose request or which command it was: it is neither answered nor applied again; "
        "if this is a retry its outcome is unknown -- check the state, then use a new request_id", "request_id")


def attributing(clock: DedupeClock) -> DedupeClock:
    """The clock with `unattributed_until` set: every answer a clock written by the
    earlier version remembers was kept by request id alone."""
    if clock.unattributed_until is not None:
        return clock
    return dataclasses.replace(clock, unattributed_until=clock.tail)


def may_hold_unattributed(clock: DedupeClock) -> bool:
    """Whether an answer kept by request id alone may still be remembered."""
    return clock.head < (clock.tail if clock.unattributed_until is None else clock.unattributed_until)
